"""Security (issue 10, last bullet).

- Credentials and user data never appear in logs, Events or conditions: the manager runs with
  debug logs against a vcsim whose password is a known marker (plus a Provider with a wrong
  password that also carries it), a VM gets user data with a known marker; stdout/stderr, every
  Event and every object's status are scanned (plain and base64).
- TLS verification is on by default: a Provider without CA bundle against a TLS vcsim signed by a
  private CA gets ``ConnectFailed`` (as any unreachable endpoint) and nothing is cloned.
- RBAC: no wildcard in config/rbac; ``banlieue controller`` and ``banlieue provider vsphere`` run
  as separate processes through a VM's life; every (verb, resource) of the API double's request
  log (by the process's User-Agent) is granted by the role's ClusterRole, and every granted verb
  is used or justified in ``JUSTIFIED``.
- The container runs as non-root with a read-only root filesystem (config/manager, Dockerfile).
"""

from __future__ import annotations

import base64
import json
import re
import signal
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from banlieue.reconcilers.kinds import LEASE_CONTROLLER, LEASE_PROVIDER_VSPHERE

from . import rbac_audit
from .harness import (
    CORE,
    EVENTS,
    INFRA,
    NS,
    ON_BOTH_SERVERS,
    PASSWORD_MARKER,
    PROVIDERS,
    REPO,
    SECRETS,
    USERDATA_MARKER,
    VSMS,
    ChaosEnv,
    condition,
    wait_for,
)
from .invariants import assert_exact_vms, delete_all_and_check_clean

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(180)]

USER_DATA = f"#cloud-config\nwrite_files:\n  - path: /etc/marker\n    content: {USERDATA_MARKER}\n"


def _b64_forms(text: str) -> list[str]:
    """The base64 of ``text`` and of its marker at the three byte alignments (inner 12 chars)."""
    out = [base64.b64encode(text.encode()).decode()]
    for marker in (PASSWORD_MARKER, USERDATA_MARKER):
        for pad in range(3):
            encoded = base64.b64encode(b"x" * pad + marker.encode()).decode()
            out.append(encoded[4:16])  # skip the chunk that mixes in the padding bytes
    return out


def _leaks(text: str) -> list[str]:
    needles = [PASSWORD_MARKER, USERDATA_MARKER, *_b64_forms(USER_DATA)]
    return [n for n in needles if n in text]


def test_no_credentials_or_user_data_in_logs_events_conditions(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.single_vcenter(password=PASSWORD_MARKER)
    env.add_provider("wrong", vc, password=f"{PASSWORD_MARKER}-wrong", labels={"bad": "yes"})
    env.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ud", "namespace": NS},
                         "stringData": {"user-data": USER_DATA}})
    manager = env.start_banlieue("manager", log_level="debug")
    good = {"placement": {"providerSelector": {"matchExpressions": [{"key": "bad", "operator": "DoesNotExist"}]}}}
    names = env.create_vms(["with-user-data"], userData={"secretRef": {"name": "ud"}}, **good)
    env.wait_ready(names, 60)
    wrong = wait_for("the wrong-password Provider reports a condition", lambda: condition(
        env.get(f"{PROVIDERS}/wrong"), "Ready").get("reason") or None, 30)
    assert wrong != "Reconciled"
    # The user data reached the guest (guestinfo), so the marker was really handled.
    assert_exact_vms(env, names)
    delete_all_and_check_clean(env)
    objects = [*env.items(PROVIDERS), *env.items(f"{CORE}/vmimages"), *env.items(f"{CORE}/vmclasses")]
    manager.stop()
    log_text = manager.log.read_text(errors="replace")
    assert "debug" in log_text, "the manager did not log at debug level: the scan would prove little"
    events = env.items(EVENTS) + env.items(f"/apis/events.k8s.io/v1/namespaces/{NS}/events")
    assert events, "no Event recorded: the scan would prove little"
    found = {
        "manager stdout/stderr": _leaks(log_text),
        "Events": _leaks(json.dumps(events)),
        "statuses and conditions": _leaks(json.dumps([o.get("status") for o in objects])),
    }
    assert not any(found.values()), f"secrets leaked: {found}"


def test_tls_verification_is_on_by_default(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.add_vcenter("vc")  # TLS, server certificate signed by a private CA
    env.add_shared_objects()
    env.add_provider("vc", vc, ca=False)
    env.start_banlieue("manager")
    env.create_vms(["vm"])
    # Said as an unreachable endpoint (ConnectFailed, the message naming the caBundle among the
    # causes): a distinct reason told a Provider writer that a TLS server listens there.
    ready = wait_for("Provider Ready=False ConnectFailed", lambda: (lambda c: c if c.get("reason") == "ConnectFailed"
                     else None)(condition(env.get(f"{PROVIDERS}/vc"), "Ready")), 30)
    assert ready["status"] == "False" and "caBundle" in ready["message"], ready
    with vc.oracle() as oracle:
        assert not oracle.managed(), "a VM was cloned through an unverified TLS connection"


# --- RBAC -------------------------------------------------------------------------------------

RBAC_DIR = REPO / "config/rbac"
ROLES = {"controller": ("controller.yaml", "banlieue-controller", LEASE_CONTROLLER),
         "provider vsphere": ("provider_vsphere.yaml", "banlieue-provider-vsphere", LEASE_PROVIDER_VSPHERE)}


# Granted but not seen in the request log, and why that is right. Anything else unused fails.
JUSTIFIED: list[tuple[str, Callable[[rbac_audit.Triple, set[rbac_audit.Triple]], bool]]] = [
    ("get on a resource the role lists: no object that list does not show; uncached reads (Client.get)",
     lambda t, used: t[0] == "get" and (("list", t[1], t[2]) in used or ("patch", t[1], t[2]) in used)),
    ("cluster.x-k8s.io: the CAPI path, only when CAPI core's CRDs are installed (tests/capi)",
     lambda t, used: t[1] == "cluster.x-k8s.io"),
    ("virtualmachines/finalizers update: the VSphereMachine's controller ownerReference has blockOwnerDeletion "
     "(OwnerReferencesPermissionEnforcement admission)",
     lambda t, used: t == ("update", "banlieue.io", "virtualmachines/finalizers")),
    ("events patch: the count and lastTimestamp of a repeated Event (recorder aggregation)",
     lambda t, used: t == ("patch", "", "events")),
    ("tokenreviews/subjectaccessreviews create: only with --metrics-secure (tests/envtest/test_metrics_secure.py)",
     lambda t, used: t in {("create", "authentication.k8s.io", "tokenreviews"),
                           ("create", "authorization.k8s.io", "subjectaccessreviews")}),
    ("use-raw-placement: a custom verb the admission policy asks the authorizer about, never a request verb "
     "(tests/envtest/test_tenant_safety.py)",
     lambda t, used: t[0] == "use-raw-placement"),
    ("use-any-bootstrap-secret: a custom verb the admission policy asks the authorizer about (the controller "
     "copies a VirtualMachine's checked userData into bootstrapDataSecretRef), never a request verb "
     "(tests/envtest/test_tenant_safety.py)",
     lambda t, used: t[0] == "use-any-bootstrap-secret"),
    ("configmaps get: a CA bundle by caBundle.configMapRef (no such Provider here; "
     "test_wrong_ca_is_connect_failed_and_fixing_the_configmap_recovers)",
     lambda t, used: t == ("get", "", "configmaps")),
]


def _role_requests(env: ChaosEnv, pid: int) -> list[dict[str, Any]]:
    out = []
    for r in env.requests():
        if re.search(rf"\bpid/{pid}\b", r.get("user_agent") or ""):
            out.append(r)
            if r["method"] == "PATCH" and r["status"] == 201:  # an apply that created: authorized as create too
                out.append({**r, "method": "POST"})
    return out


def test_rbac_no_wildcards() -> None:
    assert not rbac_audit.wildcards(sorted(RBAC_DIR.glob("*.yaml")))


@ON_BOTH_SERVERS
def test_rbac_rules_match_the_calls_of_each_role(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    env.single_vcenter()
    env.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ud", "namespace": NS},
                         "stringData": {"user-data": "#cloud-config\n"}})
    samples = {d["kind"]: d for f in ("vspherecluster.yaml", "vspheremachinetemplates.yaml")
               for d in yaml.safe_load_all((REPO / "config/samples" / f).read_text()) if d}
    cluster = samples["VSphereCluster"]
    cluster["spec"]["providerRefs"] = [{"name": "vc"}]
    env.create(f"{INFRA}/namespaces/{NS}/vsphereclusters", cluster)
    env.create(f"{INFRA}/namespaces/{NS}/vspheremachinetemplates", samples["VSphereMachineTemplate"])
    procs = {role: env.start_banlieue(role) for role in ROLES}
    names = env.create_vms(["plain"]) + env.create_vms(["with-user-data"], userData={"secretRef": {"name": "ud"}})
    env.wait_ready(names, 60)
    env.wait_condition(f"{INFRA}/namespaces/{NS}/vsphereclusters/{cluster['metadata']['name']}", "Ready", 30,
                       "VSphereCluster Ready")
    delete_all_and_check_clean(env)
    assert not env.items(VSMS)
    for proc in procs.values():
        proc.kill(signal.SIGTERM)  # watches end and enter the request log; Leases are released
    problems: list[str] = []
    for role, (file, cluster_role, lease) in ROLES.items():
        grants = rbac_audit.granted(RBAC_DIR / file, cluster_role)
        used = rbac_audit.used(_role_requests(env, procs[role].pid))
        assert used, f"{role}: no request seen from pid {procs[role].pid}"
        for triple, objects in used.items():
            for name in objects:
                if not rbac_audit.allows(grants, triple, name):
                    problems.append(f"{role}: {triple} on {name or '(collection)'} is used but not granted")
        assert ("update", "coordination.k8s.io", "leases") in used and used[("update", "coordination.k8s.io", "leases")] == {lease}
        for grant in {g.triple for g in grants} - set(used):
            if not any(rule(grant, set(used)) for _, rule in JUSTIFIED):
                problems.append(f"{role}: {grant} is granted, never used, not justified")
    assert not problems, "\n".join(sorted(problems))


# --- the container ------------------------------------------------------------------------------


def test_container_non_root_read_only_root_fs() -> None:
    docs = [d for d in yaml.safe_load_all((REPO / "config/manager/manager.yaml").read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert int(pod["securityContext"].get("runAsUser", 1)) != 0
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, container["name"]
        assert sc["allowPrivilegeEscalation"] is False, container["name"]
        assert sc["runAsNonRoot"] is True and int(sc.get("runAsUser", 1)) != 0, container["name"]
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), container["name"]
        writable = {m["mountPath"] for m in container.get("volumeMounts") or []}
        assert writable <= {"/tmp"}, f"writable mounts beyond /tmp: {writable}"
    dockerfile = (REPO / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.MULTILINE)
    assert users, "the image does not set USER"
    final = users[-1].split(":")[0]
    assert final not in ("0", "root") and final.isdigit(), f"final USER {users[-1]} (numeric non-root expected)"

