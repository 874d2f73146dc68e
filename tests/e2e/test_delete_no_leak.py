"""No VM leaks on deletion: ``banlieue manager`` (subprocess) + an API server (the double in its
own process, and envtest's kube-apiserver with its namespace controller) + vcsim, driven with kubectl.

(a) ``kubectl delete ns`` of a namespace holding a Secret, a Provider and a Ready VirtualMachine:
the namespace controller deletes the credentials Secret at once, the Provider waits on its
finalizer ``banlieue.io/provider`` while the VSphereMachine uses it, and the VSphereMachine
destroys the VM with the last known connection of its Provider. The VM is gone from vcsim, then
the namespace is gone; nothing stays stuck.

(b) Deleting a Provider in use: it stays (``Ready`` False ``Deleting``, the message counts the
machines), the VMs keep working; once the VMs are deleted their vSphere VMs are destroyed and
then the Provider goes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import yaml

from banlieue.cmd.dev import point_providers_at, sample_documents
from banlieue.testing.apiservers import kinds, start_api_server
from banlieue.testing.vcsim import GUEST_IP_RANGES, start_vcsim

from .harness import (
    REPO,
    ManagerEnv,
    VcsimClient,
    apply_flags,
    condition,
    requirements_skip,
    start_manager_env,
    wait_for,
)

pytestmark = [pytest.mark.vcsim, pytest.mark.kubectl, pytest.mark.timeout(180), requirements_skip()]

PROVIDER = "vcenter-a"
READY_TIMEOUT = 90.0
GONE_TIMEOUT = 60.0


# Real server only by default (BANLIEUE_TEST_APISERVER=double runs it on the double): namespace
# finalization and garbage collection are kube-apiserver's and kube-controller-manager's to judge;
# the double's run cost about 2 minutes of CI.
@pytest.fixture(scope="module", params=kinds(real_by_default=True))
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    tmp = tmp_path_factory.mktemp("delete-no-leak")
    with ExitStack() as stack:
        api = stack.enter_context(start_api_server(request.param, tmp, bookmark_interval=5.0))
        vc = stack.enter_context(start_vcsim(host=4, guest_ip=GUEST_IP_RANGES[0]))
        env = start_manager_env(stack, tmp, api, {PROVIDER: vc})
        env.docs = point_providers_at(sample_documents(REPO / "config/samples"), {PROVIDER: (vc.url, vc.ca_pem)})
        yield env


def namespace_docs(env: ManagerEnv, ns: str, vms: tuple[str, ...]) -> list[dict[str, Any]]:
    """The sample Secret and Provider ``vcenter-a``, the cluster-scoped VMClass/VMImage, and
    VirtualMachines named ``vms`` (class small), all moved to namespace ``ns``."""
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}]
    for doc in env.docs:
        name = doc["metadata"]["name"]
        if doc["kind"] in ("VMClass", "VMImage") or (doc["kind"] == "Provider" and name == PROVIDER) or name == f"{PROVIDER}-credentials":
            doc = json.loads(json.dumps(doc))
            if doc["kind"] not in ("VMClass", "VMImage"):
                doc["metadata"]["namespace"] = ns
            out.append(doc)
    for vm in vms:
        out.append({"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": vm, "namespace": ns},
                    "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}}})
    return out


def vm_path(ns: str, name: str = "") -> str:
    return f"/apis/banlieue.io/v1alpha1/namespaces/{ns}/virtualmachines" + (f"/{name}" if name else "")


def provider_path(ns: str) -> str:
    return f"/apis/banlieue.io/v1alpha1/namespaces/{ns}/providers/{PROVIDER}"


def wait_ready(env: ManagerEnv, ns: str, names: tuple[str, ...]) -> dict[str, str]:
    """Wait until every VM is Ready; returns name -> BIOS UUID (from ``status.providerID``)."""
    def ready() -> dict[str, str] | None:
        out = {}
        for name in names:
            status, vm = env.get(vm_path(ns, name))
            if status != 200 or condition(vm).get("status") != "True" or not vm["status"].get("providerID"):
                return None
            out[name] = vm["status"]["providerID"].removeprefix("vsphere://")
        return out

    try:
        return wait_for(f"VMs {names} Ready in {ns}", ready, READY_TIMEOUT, 0.5)
    except pytest.fail.Exception:
        pytest.fail(f"not Ready:\n{env.log_tail()}")


def in_vcsim(env: ManagerEnv, bios_uuids: dict[str, str]) -> list[str]:
    vc = VcsimClient(env.vcsims[PROVIDER])
    try:
        return sorted(name for name, uuid in bios_uuids.items() if vc.find_by_bios_uuid(uuid) is not None)
    finally:
        vc.close()


def test_namespace_deletion_destroys_the_vm_then_the_namespace_goes(env: ManagerEnv) -> None:
    ns = "t4"
    env.kubectl_run("apply", *apply_flags(env), "-f", "-", stdin=yaml.safe_dump_all(namespace_docs(env, ns, ("web-1",))))
    uuids = wait_ready(env, ns, ("web-1",))
    assert in_vcsim(env, uuids) == ["web-1"]
    status, provider = env.get(provider_path(ns))
    assert status == 200 and "banlieue.io/provider" in provider["metadata"]["finalizers"]

    # kubectl waits until the namespace is gone (or fails after the timeout).
    env.kubectl_run("delete", "namespace", ns, f"--timeout={GONE_TIMEOUT:g}s", timeout=GONE_TIMEOUT + 30)
    assert env.get(f"/api/v1/namespaces/{ns}")[0] == 404
    assert in_vcsim(env, uuids) == [], f"VM leaked in vcsim:\n{env.log_tail()}"


def test_provider_in_use_waits_for_its_vms(env: ManagerEnv) -> None:
    ns = "t5"
    names = ("web-1", "web-2")
    env.kubectl_run("apply", *apply_flags(env), "-f", "-", stdin=yaml.safe_dump_all(namespace_docs(env, ns, names)))
    uuids = wait_ready(env, ns, names)

    env.kubectl_run("delete", "provider", PROVIDER, "-n", ns, "--wait=false")

    def deleting() -> dict[str, Any] | None:
        status, p = env.get(provider_path(ns))
        return p if status == 200 and condition(p).get("reason") == "Deleting" else None

    provider = wait_for("Provider Ready False Deleting", deleting, 30)
    ready = condition(provider)
    assert ready["status"] == "False" and "2 VSphereMachine(s)" in ready["message"] and "web-1" in ready["message"]
    assert provider["metadata"]["deletionTimestamp"] and provider["status"]["failureDomains"]

    # The VMs keep working while the Provider waits: still Ready, still in vCenter.
    assert wait_ready(env, ns, names) == uuids and in_vcsim(env, uuids) == sorted(names)
    status, vsm = env.get(f"/apis/infrastructure.banlieue.io/v1alpha1/namespaces/{ns}/vspheremachines/web-1")
    assert status == 200 and condition(vsm).get("status") == "True", condition(vsm)

    env.kubectl_run("delete", "virtualmachines", "--all", "-n", ns, f"--timeout={GONE_TIMEOUT:g}s", timeout=GONE_TIMEOUT + 30)
    assert in_vcsim(env, uuids) == [], f"VMs leaked in vcsim:\n{env.log_tail()}"
    wait_for("Provider gone", lambda: env.get(provider_path(ns))[0] == 404, 30)
    env.kubectl_run("delete", "namespace", ns, f"--timeout={GONE_TIMEOUT:g}s", timeout=GONE_TIMEOUT + 30)
