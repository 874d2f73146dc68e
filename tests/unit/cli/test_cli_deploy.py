"""Deployment artefacts: config/manager, config/default, crdgen's kustomization, release.sh, metadata."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from banlieue import cli
from banlieue.cmd.crdgen import write_kustomization
from banlieue.cmd.parser import RoleCommand, parse_command

ROOT = Path(__file__).resolve().parents[3]
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl (with built-in kustomize) not installed")


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def manager_deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "banlieue-manager"]
    return deployment


def kustomize(path: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_deployment_args_are_valid_banlieue_flags(tmp_path: Path) -> None:
    deployment = manager_deployment(load(ROOT / "config/manager/manager.yaml"))
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    # The image's ENTRYPOINT is `banlieue`; the args must parse exactly as the CLI would.
    command = parse_command(container["args"], {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
                            home=tmp_path, sa_namespace_file=tmp_path / "ns")
    assert isinstance(command, RoleCommand)
    assert command.role == "manager"
    assert command.options.leader_elect is True
    # /metrics as controller-runtime serves it by default (issue 23 case 7): HTTPS, TokenReview
    # and SubjectAccessReview; never plain HTTP on all interfaces.
    assert command.options.metrics_listen == ("", 8443)
    assert command.options.metrics_secure is True
    assert command.options.health_probe_listen == ("", 8081)


def test_deployment_is_locked_down() -> None:
    deployment = manager_deployment(load(ROOT / "config/manager/manager.yaml"))
    assert deployment["metadata"]["namespace"] == "banlieue-system"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = pod["containers"]
    sc = container["securityContext"]
    assert (sc["runAsNonRoot"], sc["runAsUser"], sc["readOnlyRootFilesystem"], sc["allowPrivilegeEscalation"]) == (
        True, 65532, True, False)
    assert sc["capabilities"] == {"drop": ["ALL"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8443, "health": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {"requests", "limits"} <= container["resources"].keys()
    [mount] = container["volumeMounts"]
    [volume] = pod["volumes"]
    assert mount["mountPath"] == "/tmp" and volume["name"] == mount["name"] and "emptyDir" in volume


def test_dockerfile_user_matches_deployment() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    assert "USER 65532:65532" in lines
    assert lines[-2:] == ['ENTRYPOINT ["banlieue"]', 'CMD ["manager"]']


def test_metrics_service_selects_the_manager() -> None:
    [service] = load(ROOT / "config/manager/service.yaml")
    deployment = manager_deployment(load(ROOT / "config/manager/manager.yaml"))
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8443, "targetPort": "metrics", "protocol": "TCP"}]


def test_metadata_maps_release_series_to_v1beta2() -> None:
    [metadata] = load(ROOT / "metadata.yaml")
    assert metadata["apiVersion"] == "clusterctl.cluster.x-k8s.io/v1alpha3"
    assert metadata["kind"] == "Metadata"
    assert {"major": 0, "minor": 1, "contract": "v1beta2"} in metadata["releaseSeries"]


def test_write_kustomization_lists_yaml_files(tmp_path: Path) -> None:
    for name in ("b.yaml", "a.yaml", "notes.txt", "Kustomization"):
        (tmp_path / name).write_text("x: 1\n")
    write_kustomization(tmp_path)
    [body] = load(tmp_path / "Kustomization")
    assert body["resources"] == ["a.yaml", "b.yaml"]


def test_crdgen_writes_crds_and_their_kustomization(tmp_path: Path) -> None:
    assert cli.main(["crdgen", "--out", str(tmp_path)], {}) == 0
    [body] = load(tmp_path / "Kustomization")
    crd_files = sorted(p.name for p in tmp_path.glob("*.yaml") if p.name != "Kustomization")
    assert body["resources"] == crd_files
    assert len(crd_files) == 8


@needs_kubectl
def test_config_manager_renders() -> None:
    kinds = sorted(d["kind"] for d in kustomize(ROOT / "config/manager"))
    assert kinds == ["Deployment", "Namespace", "Service"]


@needs_kubectl
def test_config_default_renders_everything_in_banlieue_system() -> None:
    docs = kustomize(ROOT / "config/default")
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Namespace", "Deployment", "Service", "ClusterRole"} <= kinds
    for doc in docs:
        assert doc["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "infrastructure-banlieue"
        if "namespace" in doc["metadata"]:
            assert doc["metadata"]["namespace"] == "banlieue-system"
    sa_name = manager_deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"]
    assert any(d["kind"] == "ServiceAccount" and d["metadata"]["name"] == sa_name for d in docs)


@needs_kubectl
def test_config_default_serves_metrics_over_https_to_authorized_scrapers_only(tmp_path: Path) -> None:
    """Issue 23 case 7, as installed: the rendered Deployment runs ``--metrics-secure`` on the
    port the Service and the ingress NetworkPolicy name, and the role the manager runs with may
    ask the API server who scrapes (TokenReview) and whether they may (SubjectAccessReview)."""
    docs = kustomize(ROOT / "config/default")
    [container] = manager_deployment(docs)["spec"]["template"]["spec"]["containers"]
    command = parse_command(container["args"], {"KUBERNETES_SERVICE_HOST": "10.96.0.1"},
                            home=tmp_path, sa_namespace_file=tmp_path / "ns")
    assert isinstance(command, RoleCommand)
    assert command.options.metrics_secure is True
    assert command.options.metrics_listen == ("", 8443)
    port = 8443
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["metrics"] == port
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "banlieue-manager-metrics"]
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(port, "metrics")]
    [ingress] = [d for d in docs if d["kind"] == "NetworkPolicy" and "Ingress" in d["spec"]["policyTypes"]]
    scraper_rules = [r for r in ingress["spec"]["ingress"] if r.get("from")]
    assert [[p["port"] for p in r["ports"]] for r in scraper_rules] == [[port]]
    assert scraper_rules[0]["from"] == [{"namespaceSelector": {"matchLabels": {"banlieue.io/metrics-scraper": "true"}}}]
    reviews = {(rule["apiGroups"][0], resource) for d in docs if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] in ("banlieue-controller", "banlieue-provider-vsphere")
               for rule in d["rules"] for resource in rule["resources"] if "create" in rule["verbs"]}
    assert {("authentication.k8s.io", "tokenreviews"), ("authorization.k8s.io", "subjectaccessreviews")} <= reviews
    [reader] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "banlieue-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


@needs_kubectl
def test_release_renders_clusterctl_components(tmp_path: Path) -> None:
    env = {**os.environ, "BANLIEUE_IMAGE": "localhost:5000/banlieue:v0.1.0-rc.1", "OUT_DIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "hack/release.sh")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = load(tmp_path / "infrastructure-components.yaml")
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 8
    [container] = manager_deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "localhost:5000/banlieue:v0.1.0-rc.1"
    assert "--log-level=${BANLIEUE_LOG_LEVEL:=info}" in container["args"]
    assert (tmp_path / "metadata.yaml").read_text() == (ROOT / "metadata.yaml").read_text()
    assert (tmp_path / "cluster-template.yaml").is_file()


def test_release_rejects_an_image_without_tag(tmp_path: Path) -> None:
    env = {**os.environ, "BANLIEUE_IMAGE": "localhost:5000/banlieue", "OUT_DIR": str(tmp_path)}
    proc = subprocess.run(["bash", str(ROOT / "hack/release.sh")], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert "must be NAME:TAG" in proc.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_scripts_pass_shellcheck() -> None:
    scripts = [ROOT / "hack/release.sh", ROOT / "hack/e2e-kind.sh"]
    proc = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stdout


def test_e2e_kind_refuses_to_start_without_credentials() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VSPHERE_")}
    proc = subprocess.run(["bash", str(ROOT / "hack/e2e-kind.sh")], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode != 0
    assert "VSPHERE_SERVER" in proc.stderr


def clusterctl_substitute(text: str, values: dict[str, str]) -> str:
    """clusterctl's variable syntax: ``${NAME}`` (required) and ``${NAME:=default}``."""
    def one(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        if name in values:
            return values[name]
        assert default is not None, f"required variable {name} not given"
        return default

    return re.sub(r"\$\{([A-Z0-9_]+)(:=([^}]*))?\}", one, text)


def test_cluster_template_renders_valid_banlieue_objects() -> None:
    required = {"CLUSTER_NAME": "demo", "NAMESPACE": "default", "KUBERNETES_VERSION": "v1.33.0",
                "CONTROL_PLANE_MACHINE_COUNT": "3", "WORKER_MACHINE_COUNT": "2",
                "CONTROL_PLANE_ENDPOINT_IP": "10.0.0.100"}
    docs = [d for d in yaml.safe_load_all(clusterctl_substitute(
        (ROOT / "templates/cluster-template.yaml").read_text(), required)) if d]
    schemas = {}
    for crd_file in (ROOT / "config/crd").glob("infrastructure.banlieue.io_*.yaml"):
        [crd] = load(crd_file)
        [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
        schemas[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]
    banlieue_docs = [d for d in docs if d["apiVersion"] == "infrastructure.banlieue.io/v1alpha1"]
    assert sorted(d["kind"] for d in banlieue_docs) == ["VSphereCluster", "VSphereMachineTemplate",
                                                         "VSphereMachineTemplate"]
    for doc in banlieue_docs:
        jsonschema.validate(doc["spec"], schemas[doc["kind"]]["properties"]["spec"])
    [cluster] = [d for d in docs if d["kind"] == "Cluster"]
    assert cluster["spec"]["infrastructureRef"] == {"apiGroup": "infrastructure.banlieue.io",
                                                    "kind": "VSphereCluster", "name": "demo"}
    [kcp] = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
    assert kcp["spec"]["replicas"] == 3
