"""Per-namespace mode and what a tenant reads in conditions (issue 23, docs/security.md), on
kube-apiserver with vcsim.

``banlieue manager --namespace team-a`` runs with the token of the ServiceAccount config/namespaced
creates: a Role and RoleBinding in ``team-a`` and the small ClusterRole of cluster-scoped reads,
nothing else (config/rbac's bindings name other ServiceAccounts). It provisions a VirtualMachine
of ``team-a`` on vcsim without one 403 (the API server's audit log), sends no request for a
namespaced object outside ``team-a``, and leaves a VirtualMachine of ``team-b`` alone.

A second Provider's vCenter refuses every clone (``vcsim --fault=CloneVM_Task:...``) with its own
fault text; the first one refuses every deletion. The VSphereMachine's and VirtualMachine's
conditions and the namespace's Events say what failed and what to do, never vCenter's text; the
manager's log has it, with the reconcile's ``reconcileID``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import yaml

from banlieue.api.rbac import NAMESPACED_CLUSTER_ROLE, NAMESPACED_PLACEHOLDER, NAMESPACED_ROLE
from banlieue.testing.apiservers import ApiServerUnderTest
from banlieue.testing.envtest import Envtest, envtest_binaries_missing
from banlieue.testing.guestnet import GUEST_IP_RANGES
from banlieue.testing.stack import BanlieueProcess, start_banlieue, wait_for
from banlieue.testing.vcsim import VcsimProcess, start_vcsim, vcsim_binary

from .test_admission import REPO_ROOT, Kubectl, kubectl_path

pytestmark = [pytest.mark.kubectl, pytest.mark.vcsim, pytest.mark.timeout(150),
              pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing())),
              pytest.mark.skipif(kubectl_path() is None, reason="kubectl not installed")]

NS, OTHER = "team-a", "team-b"
SA = f"{NAMESPACED_ROLE}-{NS}"
USER = f"system:serviceaccount:{NS}:{SA}"
FAULT_TEXT = "injected by vcsim"
"""What hack/vcsim/faults.go puts in an injected fault's message: vCenter's own words."""
CLUSTER_SCOPED_READS = {"vmclasses", "vmimages", "tokenreviews", "subjectaccessreviews"}


def _provider(name: str, vc: VcsimProcess) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-creds", "namespace": NS},
         "stringData": {"username": vc.username, "password": vc.password}},
        {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": name, "namespace": NS, "labels": {"site": name}},
         "spec": {"providerClassRef": {"name": "vsphere"},
                  "connection": {"endpoint": vc.url, "credentialsRef": {"name": f"{name}-creds"}, "caBundle": {"inline": vc.ca_pem}},
                  "capabilities": {"storageClasses": [{"name": "standard", "target": {"datastore": "LocalDS_0"}}],
                                   "networkClasses": [{"name": "default", "target": {"portGroup": "VM Network"}}]}}},
    ]


def _vm(name: str, namespace: str, site: str) -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": namespace},
            "spec": {"classRef": {"name": "ns-small"}, "imageRef": {"name": "ns-ubuntu"},
                     "placement": {"providerSelector": {"matchLabels": {"site": site}}}}}


class Env:
    def __init__(self, envtest: Envtest, admin: Kubectl, manager: BanlieueProcess, since: float) -> None:
        self.envtest, self.admin, self.manager, self.since = envtest, admin, manager, since

    def get(self, kind: str, name: str, namespace: str = NS) -> dict[str, Any]:
        proc = self.admin.run("get", kind, name, "-n", namespace, "-o", "json")
        return json.loads(proc.stdout) if proc.returncode == 0 else {}

    def condition(self, kind: str, name: str, type_: str = "Ready") -> dict[str, Any]:
        obj = self.get(kind, name)
        return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})

    def manager_requests(self) -> list[dict[str, Any]]:
        """The audit events of the manager's ServiceAccount (resource requests only)."""
        return [e for e in self.envtest.audit_events()
                if (e.get("user") or {}).get("username") == USER and e.get("objectRef")]


def _render_namespaced(kubectl: str, api: ApiServerUnderTest) -> list[dict[str, Any]]:
    """config/namespaced as an operator installs it for ``NS``: the placeholder namespace (and
    name suffix) replaced, the Deployment left out (the manager runs here as a process)."""
    rendered = api.kubectl(kubectl, "kustomize", str(REPO_ROOT / "config/namespaced"))
    assert rendered.returncode == 0, rendered.stderr
    text = rendered.stdout.replace(NAMESPACED_PLACEHOLDER, NS)
    return [d for d in yaml.safe_load_all(text) if d and d["kind"] != "Deployment"]


@pytest.fixture(scope="module")
def env(envtest: Envtest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    vcsim_binary()  # skips when the simulator cannot be built
    tmp = tmp_path_factory.mktemp("namespaced")
    api = ApiServerUnderTest("real", envtest.url, envtest.kubeconfig_path, envtest=envtest)
    admin = Kubectl(api)
    api.install(admin.kubectl)  # CRDs and admission policies (cluster-wide, once)
    for ns in (NS, OTHER):
        admin.ok("create", "namespace", ns)
    docs = _render_namespaced(admin.kubectl, api)
    kinds = sorted(d["kind"] for d in docs)
    # RBAC: only namespaced grants in NS, plus the one ClusterRole of cluster-scoped reads.
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "NetworkPolicy", "NetworkPolicy", "Role", "RoleBinding",
                     "Service", "ServiceAccount"], kinds
    assert all(d["metadata"].get("namespace", NS) == NS for d in docs)
    admin.ok("apply", "--server-side", "-f", "-", docs=docs)
    with ExitStack() as stack:
        good = stack.enter_context(start_vcsim(guest_ip=GUEST_IP_RANGES[0], fault=["Destroy_Task:ResourceInUse:0"]))
        bad = stack.enter_context(start_vcsim(fault=["CloneVM_Task:InsufficientResourcesFault:0"]))
        admin.ok("apply", "--server-side", "-f", "-", docs=[
            *_provider("good", good), *_provider("bad", bad),
            {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "ns-small"},
             "spec": {"hardware": {"cpus": 1, "memoryMiB": 512, "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}]},
                      "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}}},
            {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": "ns-ubuntu"},
             "spec": {"sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "ubuntu-22.04"}]}}])
        envtest.ensure_service_account(NS, SA)
        kubeconfig = envtest.write_token_kubeconfig(tmp / "manager.kubeconfig", envtest.token_for(NS, SA), namespace=NS)
        since = time.time()
        manager = start_banlieue(kubeconfig, tmp / "manager.log", "manager", "--namespace", NS,
                                 leader_election_namespace=NS, metrics=False, log_format="json")
        stack.callback(manager.stop)
        manager.wait_ready(40)
        yield Env(envtest, admin, manager, since)


def test_the_namespaced_manager_provisions_in_its_namespace_without_one_403(env: Env) -> None:
    env.admin.ok("apply", "--server-side", "-f", "-", docs=[_vm("web", NS, "good"), _vm("elsewhere", OTHER, "good")])

    def ready() -> dict[str, Any] | None:
        cond = env.condition("virtualmachine", "web")
        return cond if cond.get("status") == "True" else None

    try:
        wait_for("VirtualMachine team-a/web Ready", ready, 90)
    except BaseException:
        print(env.manager.tail(60))
        raise
    machine = env.get("vspheremachine", "web")
    assert machine["status"]["instanceUUID"], machine["status"]
    # The other namespace's VirtualMachine: never seen (no finalizer, no status, no VSphereMachine).
    other = env.get("virtualmachine", "elsewhere", OTHER)
    assert not other["metadata"].get("finalizers") and not other.get("status"), other
    assert env.admin.run("get", "vspheremachine", "elsewhere", "-n", OTHER).returncode != 0
    requests = env.manager_requests()
    assert requests, "no audit event of the manager's ServiceAccount"
    denied = [(e["verb"], e["objectRef"]) for e in requests if (e.get("responseStatus") or {}).get("code") == 403]
    assert denied == [], denied
    outside = {(e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("namespace")) for e in requests
               if e["objectRef"].get("namespace", "") != NS and e["objectRef"].get("resource") not in CLUSTER_SCOPED_READS}
    assert outside == set(), outside
    listed_secrets = [e for e in requests if e["objectRef"].get("resource") in ("secrets", "configmaps") and e["verb"] != "get"]
    assert listed_secrets == []


def test_a_refused_clone_and_deletion_do_not_show_vcenters_text(env: Env) -> None:
    env.admin.ok("apply", "--server-side", "-f", "-", docs=[_vm("doomed", NS, "bad")])

    def failed() -> dict[str, Any] | None:
        cond = env.condition("vspheremachine", "doomed")
        return cond if cond.get("reason") == "CloneFailed" else None

    cond = wait_for("VSphereMachine doomed CloneFailed", failed, 60)
    assert FAULT_TEXT not in cond["message"] and "InsufficientResourcesFault" in cond["message"], cond
    assert "log" in cond["message"], cond  # says where the detail is

    def mirrored() -> dict[str, Any] | None:
        vm = env.get("virtualmachine", "doomed")
        conds = (vm.get("status") or {}).get("conditions") or []
        return vm if any("InsufficientResourcesFault" in c.get("message", "") for c in conds) else None

    vm = wait_for("VirtualMachine doomed shows the failure", mirrored, 30)
    assert FAULT_TEXT not in json.dumps(vm["status"]), vm["status"]

    # Every Destroy_Task on the good vCenter is refused: the Deleting message is generic too.
    env.admin.ok("delete", "virtualmachine", "web", "-n", NS, "--wait=false")

    def deleting() -> dict[str, Any] | None:
        c = env.condition("vspheremachine", "web")
        return c if "ResourceInUse" in c.get("message", "") else None

    cond = wait_for("VSphereMachine web: deletion refused", deleting, 30)
    assert cond["reason"] == "Deleting" and FAULT_TEXT not in cond["message"], cond

    events = json.loads(env.admin.ok("get", "events", "-n", NS, "-o", "json"))["items"]
    assert events and not [e["message"] for e in events if FAULT_TEXT in (e.get("message") or "")]
    # The detail is in the manager's log, with the reconcile that met it.
    lines = [json.loads(line) for line in env.manager.log.read_text().splitlines() if FAULT_TEXT in line and line.startswith("{")]
    assert {line.get("event") for line in lines} >= {"vsphere action failed"}, lines[:3]
    assert all(line.get("reconcileID") and line.get("namespace") == NS for line in lines), lines[:3]
    # The deletions never succeed here: drop the finalizers by hand.
    for kind in ("vspheremachine", "virtualmachine"):
        for name in ("web", "doomed"):
            env.admin.run("patch", kind, name, "-n", NS, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')


def test_the_namespaced_rbac_is_roles_plus_cluster_scoped_reads() -> None:
    """config/namespaced/rbac as generated: every namespaced grant in the Role, and the
    ClusterRole holds only cluster-scoped resources (VMClass/VMImage reads, the two reviews)."""
    docs = [d for p in (REPO_ROOT / "config/namespaced/rbac").glob("*.yaml") for d in yaml.safe_load_all(p.read_text()) if d]
    [cluster_role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert cluster_role["metadata"]["name"] == NAMESPACED_CLUSTER_ROLE
    assert {r for rule in cluster_role["rules"] for r in rule["resources"]} == CLUSTER_SCOPED_READS
    assert all(set(rule["verbs"]) <= {"get", "list", "watch", "create"} for rule in cluster_role["rules"])
    creates = {r for rule in cluster_role["rules"] if "create" in rule["verbs"] for r in rule["resources"]}
    assert creates == {"tokenreviews", "subjectaccessreviews"}
    [role] = [d for d in docs if d["kind"] == "Role"]
    assert {r for rule in role["rules"] for r in rule["resources"]} & CLUSTER_SCOPED_READS == set()
    for rule in role["rules"]:
        if {"secrets", "configmaps"} & set(rule["resources"]):
            assert rule["verbs"] == ["get"], rule
