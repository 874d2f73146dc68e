"""Rendered RBAC and admission policies: committed and fresh, least privilege, CAPI aggregation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from banlieue.api import admission, rbac
from banlieue.api.render import dump_documents

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("directory", "render"),
    [pytest.param("rbac", rbac.render_rbac, id="rbac"), pytest.param("admission", admission.render_admission, id="admission")],
)
def test_committed_files_are_fresh(directory: str, render: object, tmp_path: Path) -> None:
    files = render()  # type: ignore[operator]
    committed = {p.name for p in (REPO / "config" / directory).glob("*.yaml")}
    assert committed == set(files)
    assert (REPO / "config" / directory / "Kustomization").is_file()
    for name, docs in files.items():
        assert (REPO / "config" / directory / name).read_text() == dump_documents(docs), name
    kust = yaml.safe_load((REPO / "config" / directory / "Kustomization").read_text())
    assert kust["resources"] == sorted(files)


def _docs() -> list[dict[str, object]]:
    return [d for docs in rbac.render_rbac().values() for d in docs]


def test_no_wildcards_anywhere() -> None:
    for doc in _docs():
        for rule in doc.get("rules", []):  # type: ignore[attr-defined]
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (doc["metadata"], rule)


def _allowed(role: str, group: str, resource: str, verb: str, name: str | None = None) -> bool:
    for doc in _docs():
        if doc["kind"] != "ClusterRole" or doc["metadata"]["name"] != role:  # type: ignore[index]
            continue
        for rule in doc["rules"]:  # type: ignore[attr-defined]
            names = rule.get("resourceNames")
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                if not names or name in names:
                    return True
    return False


@pytest.mark.parametrize(
    ("role", "group", "resource", "verb", "name", "want"),
    [
        ("banlieue-controller", "banlieue.io", "virtualmachines", "patch", None, True),
        ("banlieue-controller", "banlieue.io", "virtualmachines/status", "patch", None, True),
        ("banlieue-controller", "banlieue.io", "virtualmachines/finalizers", "update", None, True),
        ("banlieue-controller", "infrastructure.banlieue.io", "vspheremachines", "create", None, True),
        ("banlieue-controller", "infrastructure.banlieue.io", "vspheremachines", "delete", None, True),
        ("banlieue-controller", "infrastructure.banlieue.io", "vsphereclusters/status", "patch", None, True),
        ("banlieue-controller", "banlieue.io", "providers", "patch", None, False),
        ("banlieue-controller", "", "secrets", "get", None, False),
        ("banlieue-controller", "coordination.k8s.io", "leases", "update", "banlieue-controller", True),
        ("banlieue-controller", "coordination.k8s.io", "leases", "update", "banlieue-provider-vsphere", False),
        ("banlieue-provider-vsphere", "banlieue.io", "providers/status", "patch", None, True),
        ("banlieue-provider-vsphere", "banlieue.io", "vmimages/status", "patch", None, True),
        # Trimmed to what the code uses (tests/chaos/test_security.py audits the request log):
        # no update (PUT) anywhere, no events.k8s.io Events (core/v1 only), no finalizers of objects the role owns none of.
        ("banlieue-provider-vsphere", "banlieue.io", "vmimages/status", "update", None, False),
        ("banlieue-provider-vsphere", "banlieue.io", "vmimages", "patch", None, False),
        ("banlieue-provider-vsphere", "infrastructure.banlieue.io", "vspheremachines/finalizers", "update", None, False),
        ("banlieue-provider-vsphere", "banlieue.io", "providers/finalizers", "update", None, False),
        ("banlieue-provider-vsphere", "infrastructure.banlieue.io", "vsphereclusters", "list", None, False),
        ("banlieue-provider-vsphere", "infrastructure.banlieue.io", "vspheremachines", "update", None, False),
        ("banlieue-provider-vsphere", "events.k8s.io", "events", "create", None, False),
        ("banlieue-controller", "infrastructure.banlieue.io", "vsphereclusters", "patch", None, False),
        ("banlieue-controller", "infrastructure.banlieue.io", "vsphereclusters/status", "update", None, False),
        ("banlieue-controller", "banlieue.io", "virtualmachines", "update", None, False),
        ("banlieue-provider-vsphere", "infrastructure.banlieue.io", "vspheremachinetemplates/status", "patch", None, True),
        ("banlieue-provider-vsphere", "infrastructure.banlieue.io", "vspheremachines", "create", None, False),
        # Referenced Secrets/ConfigMaps are read by name only (issue 23): no list, no watch.
        ("banlieue-provider-vsphere", "", "secrets", "get", None, True),
        ("banlieue-provider-vsphere", "", "secrets", "watch", None, False),
        ("banlieue-provider-vsphere", "", "secrets", "list", None, False),
        ("banlieue-provider-vsphere", "", "secrets", "update", None, False),
        ("banlieue-provider-vsphere", "", "configmaps", "list", None, False),
        ("banlieue-provider-vsphere", "", "configmaps", "get", None, True),
        ("banlieue-provider-vsphere", "cluster.x-k8s.io", "machines", "get", None, True),
        ("banlieue-provider-vsphere", "cluster.x-k8s.io", "machines", "patch", None, False),
        ("banlieue-provider-vsphere", "", "events", "create", None, True),
        ("banlieue-capi-aggregate", "infrastructure.banlieue.io", "vspheremachines", "delete", None, True),
        ("banlieue-capi-aggregate", "infrastructure.banlieue.io", "vsphereclustertemplates", "create", None, True),
        ("banlieue-capi-aggregate", "infrastructure.banlieue.io", "vsphereclusters/status", "patch", None, True),
        ("banlieue-capi-aggregate", "banlieue.io", "virtualmachines", "get", None, False),
    ],
)
def test_least_privilege_table(role: str, group: str, resource: str, verb: str, name: str | None, want: bool) -> None:
    assert _allowed(role, group, resource, verb, name) is want


def test_bindings_and_service_accounts() -> None:
    docs = _docs()
    sas = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}  # type: ignore[index]
    assert sas == {"banlieue-controller", "banlieue-provider-vsphere", "banlieue-manager"}
    for d in docs:
        if d["kind"] == "ServiceAccount":
            assert d["metadata"]["namespace"] == "banlieue-system"  # type: ignore[index]
    bound = {
        (d["roleRef"]["name"], d["subjects"][0]["name"])  # type: ignore[index]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"
    }
    assert bound == {
        ("banlieue-controller", "banlieue-controller"),
        ("banlieue-provider-vsphere", "banlieue-provider-vsphere"),
        ("banlieue-controller", "banlieue-manager"),
        ("banlieue-provider-vsphere", "banlieue-manager"),
    }
    agg = next(d for d in docs if d["metadata"]["name"] == "banlieue-capi-aggregate")  # type: ignore[index]
    assert agg["metadata"]["labels"] == {"cluster.x-k8s.io/aggregate-to-manager": "true",  # type: ignore[index]
                                         "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager": "true"}


def test_admission_policies_shape() -> None:
    files = admission.render_admission()
    policies = {d["metadata"]["name"]: d for docs in files.values() for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"] for docs in files.values() for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == bindings
    for pol in policies.values():
        assert pol["apiVersion"] == "admissionregistration.k8s.io/v1"
        rules = pol["spec"]["matchConstraints"]["resourceRules"]
        assert all("/" not in r for rule in rules for r in rule["resources"])  # never blocks status writes
    immut = policies["banlieue-virtualmachine-immutable-refs"]["spec"]
    assert immut["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    assert {v["expression"] for v in immut["validations"]} == {
        "object.spec.classRef == oldObject.spec.classRef",
        "object.spec.imageRef == oldObject.spec.imageRef",
    }
