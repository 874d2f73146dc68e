"""The workload-cluster stand-in alone (``banlieue.testing.workload``), without CAPI: a real
kube-apiserver on a 127.x address serving with a given CA, and the ``Kubelet``'s Node, kubeadm
uploads and Ready transitions as it sees the VM's power state and boot time."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from banlieue.testing.capi import NetworkRuleViolation
from banlieue.testing.envtest import envtest_binaries_missing
from banlieue.testing.workload import (
    Kubelet,
    VMPower,
    WorkloadCluster,
    generate_cluster_ca,
    standin_host,
    start_workload_cluster,
)

HOST = standin_host(9)  # a loopback address no other test of this process uses


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkloadCluster]:
    missing = envtest_binaries_missing()
    if missing:
        pytest.skip(missing)
    d = tmp_path_factory.mktemp("standin")
    wc = start_workload_cluster(d / "wc", HOST, generate_cluster_ca(d / "ca"))
    try:
        yield wc
    finally:
        wc.stop()


def test_serves_on_the_endpoint_with_the_given_ca(workload: WorkloadCluster, tmp_path: Path) -> None:
    """The serving certificate chains to the given CA and names the endpoint's IP; the admin
    client certificate (what KCP's kubeconfig carries: signed by the same CA) is accepted."""
    assert workload.url == f"https://{HOST}:6443"
    ctx = ssl.create_default_context(cafile=str(workload.envtest.ca_file))  # hostname checked against the IP SAN
    with ssl.create_connection((HOST, 6443), timeout=5) as sock, ctx.wrap_socket(sock, server_hostname=HOST) as tls:
        assert tls.version() is not None
    status, body = workload.request("GET", "/api/v1/namespaces/kube-system")
    assert status == 200, body
    other = generate_cluster_ca(tmp_path / "other")
    assert other[0] != workload.envtest.ca_pem


def test_refuses_a_non_loopback_endpoint(tmp_path: Path) -> None:
    with pytest.raises(NetworkRuleViolation, match=r"'192.168.1.10' is not a loopback IP"):
        start_workload_cluster(tmp_path, "192.168.1.10", ("", ""))


async def test_kubelet_registers_reports_power_loss_and_comes_back_after_boot(workload: WorkloadCluster) -> None:
    power: dict[str, VMPower] = {"vsphere://4201": VMPower("poweredOn", "2026-01-01T00:00:00+00:00")}

    async def power_state(provider_id: str) -> VMPower | None:
        return power.get(provider_id)

    kubelet = Kubelet(workload, power_state, "demo", reboot_seconds=3600)
    cp = {"metadata": {"name": "demo-cp-0", "labels": {"cluster.x-k8s.io/control-plane": ""}},
          "spec": {"providerID": "vsphere://4201", "infrastructureRef": {"name": "demo-cp-0"}}}
    not_yet = {"metadata": {"name": "demo-md-0"}, "spec": {"infrastructureRef": {"name": "demo-md-0"}}}  # no providerID yet
    await kubelet.sync([cp, not_yet])
    node = workload.node("demo-cp-0")
    assert node is not None and node["spec"]["providerID"] == "vsphere://4201" and not node["spec"].get("taints")
    assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": HOST}]  # loopback only: the API server may dial it
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]} == {
        "Ready": "True", "MemoryPressure": "False", "DiskPressure": "False", "PIDPressure": "False"}
    assert workload.node("demo-md-0") is None
    status, cm = workload.request("GET", "/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    assert status == 200 and "kind: ClusterConfiguration" in cm["data"]["ClusterConfiguration"]
    pods = workload.call("GET", "/api/v1/namespaces/kube-system/pods")["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == [f"{c}-demo-cp-0" for c in ("etcd", "kube-apiserver", "kube-controller-manager",
                                                                                  "kube-scheduler")]
    assert all(p["status"]["phase"] == "Running" for p in pods)

    def ready() -> str:
        n = workload.node("demo-cp-0")
        assert n is not None
        return str(next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready"))

    # Power-cycled between two syncs (off, then on with a new boot time): the kubelet is gone,
    # and back only reboot_seconds after the new boot.
    boot = datetime.datetime.now(datetime.UTC).isoformat()
    power["vsphere://4201"] = VMPower("poweredOn", boot)
    await kubelet.sync([cp])
    assert ready() == "Unknown"
    await kubelet.sync([cp])
    assert ready() == "Unknown"  # booting: 3600 s not elapsed
    kubelet.reboot_seconds = 0
    await kubelet.sync([cp])
    assert ready() == "True"
    # Powered off: Unknown, and it stays Unknown while off.
    power["vsphere://4201"] = VMPower("poweredOff", None)
    await kubelet.sync([cp])
    await kubelet.sync([cp])
    assert ready() == "Unknown"
    n = workload.node("demo-cp-0")
    assert n is not None and {c["status"] for c in n["status"]["conditions"]} == {"Unknown"}
    assert [e for e in kubelet.events if "Ready" in e] == [f"Node demo-cp-0 Ready Unknown (VM poweredOn, boot {boot})",
                                                          f"Node demo-cp-0 Ready True (boot {boot})",
                                                          "Node demo-cp-0 Ready Unknown (VM poweredOff, boot None)"]
