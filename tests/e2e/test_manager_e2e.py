"""``banlieue manager`` end to end: real processes, real HTTP, real SOAP.

The API server (the double in its own process, then envtest's kube-apiserver, where the manager
runs with a ServiceAccount token bound only to config/rbac), one vcsim per sample Provider, and the manager
as ``python -m banlieue.cli manager --leader-elect``. config/crd and config/samples go in with
kubectl. Checked: probes and metrics, the sample VMs Ready in vcsim with their class's shape,
deletion removing the vSphere VM before the objects, and SIGTERM exiting 0 with both Leases
released. The tests share one environment (module fixture) and run in file order; the SIGTERM
test is last because it stops the manager.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from typing import Any

import pytest
import yaml

from banlieue.backends.vsphere import guestinfo
from banlieue.cmd.dev import sample_documents
from banlieue.reconcilers.kinds import LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE

from .harness import REPO, ManagerEnv, VcsimClient, apply_flags, condition, http, requirements_skip, wait_for

pytestmark = [pytest.mark.vcsim, pytest.mark.kubectl, pytest.mark.timeout(120), requirements_skip()]

VMS = "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines"
VSMS = "/apis/infrastructure.banlieue.io/v1alpha1/namespaces/default/vspheremachines"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
READY_TIMEOUT = 90.0


def sample_vm_names(env: ManagerEnv) -> list[str]:
    return sorted(d["metadata"]["name"] for d in env.docs if d.get("kind") == "VirtualMachine")


def all_ready(env: ManagerEnv) -> dict[str, dict[str, Any]] | None:
    status, body = env.get(VMS)
    if status != 200:
        return None
    vms = {vm["metadata"]["name"]: vm for vm in body["items"]}
    wanted = sample_vm_names(env)
    if all(condition(vms.get(n, {}), "Ready").get("status") == "True" for n in wanted):
        return {n: vms[n] for n in wanted}
    return None


def wait_all_ready(env: ManagerEnv) -> dict[str, dict[str, Any]]:
    try:
        return wait_for("sample VirtualMachines Ready", lambda: all_ready(env), READY_TIMEOUT, 0.5)
    except pytest.fail.Exception:
        _, body = env.get(VMS)
        states = {vm["metadata"]["name"]: condition(vm, "Ready") for vm in (body or {}).get("items", [])}
        pytest.fail(f"not Ready within {READY_TIMEOUT} s: {states}\nmanager log:\n{env.log_tail()}")


def scrape(env: ManagerEnv) -> str:
    status, text = http("GET", env.metrics_url)
    assert status == 200
    return str(text)


def sample_value(metrics: str, metric: str, **labels: str) -> float | None:
    """The value of the first sample of ``metric`` whose labels include ``labels``."""
    for line in metrics.splitlines():
        match = re.match(rf"^{metric}\{{(.*)\}} (\S+)$", line)
        if match and all(f'{k}="{v}"' in match.group(1) for k, v in labels.items()):
            return float(match.group(2))
    return None


def test_probes_and_metrics(manager_env: ManagerEnv) -> None:
    env = manager_env
    assert http("GET", env.probes_url + "/healthz") == (200, "ok")
    status, text = http("GET", env.probes_url + "/readyz?verbose")
    assert status == 200
    # One Manager per role; the shared /readyz requires both roles' caches.
    assert "[+]informers-synced ok" in text and "[+]informers-synced-provider-vsphere ok" in text
    def reconciled() -> str | None:
        # Every result counts (a Provider's reconcile ends in requeue_after: periodic re-read).
        text = scrape(env)
        totals = [
            sum(sample_value(text, "controller_runtime_reconcile_total", controller=c, result=r) or 0.0
                for r in ("success", "error", "requeue", "requeue_after"))
            for c in ("virtualmachine", "vspherecluster", "provider", "vmimage", "vspheremachine", "vspheremachinetemplate")
        ]
        return text if all(totals) else None

    metrics = wait_for("controller_runtime_reconcile_total > 0 for every controller", reconciled, 60)
    assert sample_value(metrics, "leader_election_master_status", name=LEASE_CONTROLLER) == 1.0
    assert sample_value(metrics, "leader_election_master_status", name=LEASE_PROVIDER_VSPHERE) == 1.0
    for phase in ("Pending", "Provisioning", "Ready", "Deleting", "Failed"):
        assert sample_value(metrics, "banlieue_virtual_machines", phase=phase) is not None


def test_sample_vms_become_ready_in_vcsim(manager_env: ManagerEnv) -> None:
    env = manager_env
    vms = wait_all_ready(env)
    classes = {d["metadata"]["name"]: d["spec"]["hardware"] for d in env.docs if d.get("kind") == "VMClass"}
    clients = {name: VcsimClient(vc) for name, vc in env.vcsims.items()}
    try:
        for name, vm in vms.items():
            status = vm["status"]
            assert status["providerID"].startswith("vsphere://"), name
            assert status.get("addresses"), f"{name} has no addresses"
            assert condition(vm, "InfrastructureReady").get("status") == "True"
            provider = status["scheduled"]["providerName"]
            found = clients[provider].find_by_bios_uuid(status["providerID"].removeprefix("vsphere://"))
            assert found is not None, f"{name}: no VM with {status['providerID']} in {provider}'s vcsim"
            hardware = classes[vm["spec"]["classRef"]["name"]]
            assert found.config.hardware.numCPU == hardware["cpus"], name
            assert found.config.hardware.memoryMB == hardware["memoryMiB"], name
            assert str(found.runtime.powerState) == "poweredOn", name
    finally:
        for client in clients.values():
            client.close()
    # Rules of the samples: the db VMs stay on site a, on different compute clusters.
    assert {vms[n]["status"]["scheduled"]["providerName"] for n in ("db-0", "db-1")} == {"vcenter-a"}
    assert vms["db-0"]["status"]["scheduled"]["failureDomain"] != vms["db-1"]["status"]["scheduled"]["failureDomain"]
    ready = wait_for("banlieue_virtual_machines{phase=Ready} = 4",
                     lambda: sample_value(scrape(env), "banlieue_virtual_machines", phase="Ready") == len(vms), 10)
    assert ready


def _guest_ethernet(env: ManagerEnv, vm: dict[str, Any]) -> dict[str, Any]:
    """The one ethernet of the cloud-init network config in the guestinfo of ``vm``'s vCenter VM
    (found by its providerID, read through an independent pyVmomi session)."""
    client = VcsimClient(env.vcsims[vm["status"]["scheduled"]["providerName"]])
    try:
        found = client.find_by_bios_uuid(vm["status"]["providerID"].removeprefix("vsphere://"))
        assert found is not None
        md, _ = guestinfo.decode({o.key: str(o.value) for o in found.config.extraConfig})
    finally:
        client.close()
    assert md is not None
    [eth] = md["network"]["ethernets"].values()
    return dict(eth)


def test_per_vm_network_settings_reach_guestinfo_in_vcsim(manager_env: ManagerEnv) -> None:
    """config/samples/network/static-address.yaml: the VM's own eth0 addresses, gateways and name
    servers (over the class's DHCP) are in the cloud-init metadata of its vCenter VM, and the
    simulated guest reports the static address."""
    env = manager_env
    wait_all_ready(env)
    docs = sample_documents(REPO / "config/samples/network")
    [sample] = [d for d in docs if d.get("kind") == "VirtualMachine"]
    name = sample["metadata"]["name"]
    override = sample["spec"]["network"]["interfaces"][0]
    env.kubectl_run("apply", *apply_flags(env), "-f", "-", stdin=yaml.safe_dump_all(docs))
    wait_for(f"{name} Ready", lambda: condition(env.get(f"{VMS}/{name}")[1], "Ready").get("status") == "True", READY_TIMEOUT)
    _, vm = env.get(f"{VMS}/{name}")
    eth0 = _guest_ethernet(env, vm)
    assert eth0["dhcp4"] is False and eth0["addresses"] == override["addresses"]
    assert eth0["routes"] == [{"to": "0.0.0.0/0", "via": override["gateway4"]}, {"to": "::/0", "via": override["gateway6"]}]
    assert eth0["nameservers"] == {"addresses": override["nameservers"]}
    assert vm["status"]["addresses"][0]["address"] == override["addresses"][0].split("/")[0]

    # Day 2 (found by a new-user pass): a name server changed on the running VM reaches its
    # guestinfo (before: the VSphereMachine's spec changed, guestinfo never did, Ready stayed True).
    changed = ["192.0.2.53"]
    patch = {"spec": {"network": {"interfaces": [{**override, "nameservers": changed}]}}}
    env.kubectl_run("patch", "virtualmachine", name, "--type=merge", "-p", json.dumps(patch))

    def nameservers() -> list[str] | None:
        got = list(_guest_ethernet(env, vm)["nameservers"]["addresses"])
        return got if got == changed else None

    wait_for("the changed name server in guestinfo", nameservers, 60)
    env.kubectl_run("delete", "virtualmachine", name, "--wait=false")
    wait_for(f"{name} deleted", lambda: env.get(f"{VMS}/{name}")[0] == 404, 60)


AUDIT_METHODS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}


def _requests(env: ManagerEnv, name: str) -> list[tuple[str, str, str, int]]:
    """``(method, path, query, status)`` of the requests whose path contains ``/<name>``: the
    double's request log, or kube-apiserver's audit log (written before each answer: blocking mode)."""
    if env.api.envtest is None:
        status, body = http("GET", env.api_url + f"/debug/requests?pathContains=/{name}")
        assert status == 200
        return [(r["method"], r["path"], r["query"], r["status"]) for r in body["items"]]
    out = []
    for e in env.api.envtest.audit_events():
        path, _, query = e["requestURI"].partition("?")
        if f"/{name}" in path and e["verb"] in AUDIT_METHODS:
            out.append((AUDIT_METHODS[e["verb"]], path, query, int(e.get("responseStatus", {}).get("code", 0))))
    return out


def _writes_to(env: ManagerEnv, name: str) -> Counter[str]:
    """Successful writes to VirtualMachine and VSphereMachine ``name``, as ``"<verb>
    <resource>[/status] (apply|merge)"`` (server-side apply carries a fieldManager; banlieue's
    finalizer patches are merge patches without one)."""
    out: Counter[str] = Counter()
    for method, path, query, code in _requests(env, name):
        resource = path.split("/namespaces/default/", 1)[-1].replace(f"/{name}", "")
        if method in ("POST", "PUT", "PATCH", "DELETE") and code < 300 and path.split("/")[-1] in (name, "status"):
            out[f"{method} {resource} ({'apply' if 'fieldManager=' in query else 'merge'})"] += 1
    return out


def test_a_new_vm_takes_eight_writes_from_create_to_ready(manager_env: ManagerEnv) -> None:
    """``writes_per_vm`` (docs/performance.md) with real processes: the user's create, the VM
    finalizer, 2 VM status writes, the controller's VSphereMachine apply (carrying the provider's
    finalizer: no finalizer patch), the provider's providerID apply and 2 VSphereMachine status
    writes (``Cloning``, then ``Provisioned``: vcsim reports the IP within the coalescing
    interval, so no ``WaitingForIPAddress`` write; ADR 0011)."""
    env = manager_env
    wait_all_ready(env)
    name = "writes-1"
    body = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": "default"},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}}}
    status, created = env.request("POST", VMS, body)
    assert status == 201, created
    wait_for(f"{name} Ready", lambda: condition(env.get(f"{VMS}/{name}")[1], "Ready").get("status") == "True", READY_TIMEOUT)
    time.sleep(1.0)  # anything written after Ready would show up now
    assert _writes_to(env, name) == {
        "PATCH virtualmachines (merge)": 1, "PATCH virtualmachines/status (apply)": 2,
        "PATCH vspheremachines (apply)": 2, "PATCH vspheremachines/status (apply)": 2,
    }, env.log_tail()
    # Writes carry the resourceVersion read (reconcilers.same_object): on the happy path nobody
    # else writes in between, so none is refused and none costs a re-read.
    assert [r for r in _requests(env, name) if r[3] == 409] == [], env.log_tail()
    _, vsm = env.get(f"{VSMS}/{name}")
    assert vsm["metadata"]["finalizers"] == ["infrastructure.banlieue.io/vspheremachine"]
    # Deletion still goes through the provider: the VM destroyed, then both objects gone.
    env.kubectl_run("delete", "virtualmachine", name, "--wait=false")
    wait_for(f"{name} deleted", lambda: env.get(f"{VMS}/{name}")[0] == 404 and env.get(f"{VSMS}/{name}")[0] == 404, 60)


def test_deleting_a_vm_removes_it_from_vcsim_then_the_objects(manager_env: ManagerEnv) -> None:
    env = manager_env
    vm = wait_all_ready(env)["web-1"]
    provider = vm["status"]["scheduled"]["providerName"]
    uuid = vm["status"]["providerID"].removeprefix("vsphere://")
    client = VcsimClient(env.vcsims[provider])
    try:
        assert client.find_by_bios_uuid(uuid) is not None
        env.kubectl_run("delete", "virtualmachine", "web-1", "--wait=false")

        def objects_gone() -> bool:
            gone = env.get(f"{VMS}/web-1")[0] == 404 and env.get(f"{VSMS}/web-1")[0] == 404
            if env.get(f"{VSMS}/web-1")[0] == 404:
                # The VSphereMachine's finalizer is dropped only after the VM is destroyed.
                assert client.find_by_bios_uuid(uuid) is None, "VSphereMachine gone before its vSphere VM"
            return gone

        wait_for("web-1 VirtualMachine and VSphereMachine deleted", objects_gone, 60)
        assert client.find_by_bios_uuid(uuid) is None
    finally:
        client.close()
    status, body = env.get(VMS)
    assert status == 200 and "web-1" not in {v["metadata"]["name"] for v in body["items"]}


def test_the_manager_was_never_forbidden(manager_env: ManagerEnv) -> None:
    """RBAC is the truth: on kube-apiserver the manager runs with a ServiceAccount token bound
    only to config/rbac; every request it made so far was allowed (the audit log has no 403)."""
    env = manager_env
    if env.api.envtest is None:
        pytest.skip("the API double authorizes every request (no RBAC)")
    events = env.api.envtest.audit_events()
    mine = [e for e in events if e.get("user", {}).get("username") == "system:serviceaccount:banlieue-system:banlieue-manager"]
    assert len(mine) > 100, f"the manager's requests are not in the audit log ({len(mine)})"
    denied = [f"{e['verb']} {e['requestURI']}" for e in mine if e.get("responseStatus", {}).get("code") == 403]
    assert denied == [], denied


def test_sigterm_exits_0_and_releases_the_leases(manager_env: ManagerEnv) -> None:
    env = manager_env
    for lease in (LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE):
        status, body = env.get(f"{LEASES}/{lease}")
        assert status == 200 and body["spec"]["holderIdentity"], lease
    code = env.stop_manager()
    assert code == 0, env.log_tail()
    for lease in (LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE):
        status, body = env.get(f"{LEASES}/{lease}")
        assert status == 200 and body["spec"]["holderIdentity"] == "", f"{lease} not released: {body['spec']}"
    assert http("GET", env.probes_url + "/healthz")[0] == 0, "probe listener still open after exit"
