"""The CAPI environment's pure parts: the network rule check and the rewrite of CAPI's rendered
configuration (``banlieue.testing.capi``), on the real documents of the pinned module."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest

from banlieue.cmd.dev import free_ports
from banlieue.testing import capi

CLUSTER_OFF_HOST = {"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "metadata": {"name": "demo"},
                    "spec": {"controlPlaneEndpoint": {"host": "10.0.0.100", "port": 6443}}}


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]"])
def test_loopback_hosts_pass(host: str) -> None:
    assert capi.is_loopback(host)
    capi.check_loopback([{"kind": "Cluster", "metadata": {"name": "x"}, "spec": {"controlPlaneEndpoint": {"host": host, "port": 6443}}}])


@pytest.mark.parametrize("host", ["10.0.0.100", "192.168.1.1", "example.com", "0.0.0.0", "128.0.0.1"])
def test_non_loopback_hosts_fail(host: str) -> None:
    assert not capi.is_loopback(host)


def test_cluster_endpoint_off_loopback_is_refused_with_the_reason() -> None:
    with pytest.raises(capi.NetworkRuleViolation, match=r"Cluster/demo: spec.controlPlaneEndpoint.host '10.0.0.100' is not on loopback"):
        capi.check_loopback([CLUSTER_OFF_HOST])


def test_provider_and_webhook_urls_are_checked() -> None:
    objs: list[dict[str, Any]] = [
        {"kind": "Provider", "metadata": {"name": "a"}, "spec": {"connection": {"endpoint": "https://vcenter.example.com/sdk"}}},
        {"kind": "Provider", "metadata": {"name": "b"}, "spec": {"connection": {"endpoint": "127.0.0.1:8989"}}},
        {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "v"},
         "webhooks": [{"name": "w1", "clientConfig": {"url": "https://10.1.1.1:9443/validate"}},
                      {"name": "w2", "clientConfig": {"service": {"name": "s", "namespace": "n"}}},
                      {"name": "w3", "clientConfig": {"url": "https://127.0.0.1:9443/validate"}}]},
    ]
    bad = capi.loopback_violations(objs)
    assert len(bad) == 3, bad
    assert "Provider/a: spec.connection.endpoint" in bad[0]
    assert "webhooks[w1].clientConfig.url 'https://10.1.1.1:9443/validate'" in bad[1]
    assert "webhooks[w2].clientConfig.service" in bad[2]


needs_tools = pytest.mark.skipif(shutil.which("go") is None or shutil.which("kubectl") is None, reason="needs go and kubectl")


@needs_tools
def test_rendered_core_configuration_is_rewritten_to_loopback(tmp_path: Path) -> None:
    """kustomize of the module's core config: the provider label is there, the Deployment,
    Service and cert-manager objects are gone, every webhook dials 127.0.0.1:PORT with our CA."""
    root = capi.module_dir()
    assert root.name == "cluster-api@v1.14.2"
    docs = capi.kustomize(root / "core/config/default")
    assert capi.loopback_violations(docs)  # as shipped: Service references
    ca = capi.generate_serving_cert(tmp_path)
    out = capi.rewrite(docs, 40123, ca)
    assert capi.loopback_violations(out) == []
    kinds = {d["kind"] for d in out}
    assert not kinds & capi.DROPPED_KINDS
    assert {"CustomResourceDefinition", "ClusterRole", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    crds = {d["metadata"]["name"]: d for d in out if d["kind"] == "CustomResourceDefinition"}
    cluster_crd = crds["clusters.cluster.x-k8s.io"]
    assert cluster_crd["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "cluster-api"
    assert capi.CA_INJECT_ANNOTATION not in cluster_crd["metadata"].get("annotations", {})
    cc = cluster_crd["spec"]["conversion"]["webhook"]["clientConfig"]
    assert cc["url"] == "https://127.0.0.1:40123/convert"
    assert base64.b64decode(cc["caBundle"]).decode() == ca
    [vwc] = [d for d in out if d["kind"] == "ValidatingWebhookConfiguration"]
    assert all(w["clientConfig"]["url"].startswith("https://127.0.0.1:40123/validate-") for w in vwc["webhooks"])
    assert (tmp_path / "tls.crt").is_file() and (tmp_path / "tls.key").is_file()


def test_cluster_template_endpoint_is_checked() -> None:
    tmpl = {"kind": "VSphereClusterTemplate", "metadata": {"name": "t"},
            "spec": {"template": {"spec": {"controlPlaneEndpoint": {"host": "10.0.0.100", "port": 6443}}}}}
    with pytest.raises(capi.NetworkRuleViolation, match=r"VSphereClusterTemplate/t: spec.template.spec.controlPlaneEndpoint.host '10.0.0.100'"):
        capi.check_loopback([tmpl])


def test_free_ports_are_distinct_loopback_ports() -> None:
    """The managers' health, diagnostics and webhook ports are chosen together: never one port
    twice (CAPI core once failed on its metrics port, already its health probe's)."""
    ports = free_ports(64)
    assert len(set(ports)) == 64 and all(0 < p < 65536 for p in ports)
