"""A hung vCenter is noticed in seconds and no VM is sent to it (issue 21, item 3).

Real processes: the API-server double, two vcsims (the sample Providers ``vcenter-a`` and
``vcenter-b``), ``banlieue manager``. vcenter-b's vcsim is frozen with SIGSTOP (it still accepts
TCP connections in the kernel's backlog but never answers: a hung vCenter, not a dead one), then
resumed with SIGCONT. Measured: the time until its Provider says ``ProviderReachable=False``
(required: 15 s), the condition's ``lastTransitionTime`` (required: when it stopped answering, not
when banlieue noticed), where a VM created meanwhile is placed (never on the frozen vCenter), and
the time until ``ProviderReachable=True`` after SIGCONT.
"""

from __future__ import annotations

import calendar
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import yaml

from banlieue.cmd.dev import point_providers_at, sample_documents
from banlieue.testing.apiservers import kinds, start_api_server
from banlieue.testing.vcsim import GUEST_IP_RANGES, start_vcsim

from .harness import REPO, ManagerEnv, apply_flags, condition, requirements_skip, start_manager_env, wait_for

pytestmark = [pytest.mark.vcsim, pytest.mark.kubectl, pytest.mark.timeout(240), requirements_skip()]

PROVIDERS = "/apis/banlieue.io/v1alpha1/namespaces/default/providers"
VMS = "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines"
KEEP = {"Secret", "ConfigMap", "Provider", "VMClass", "VMImage"}
DETECT_LIMIT = 15.0
"""Issue 21: a hung vCenter's Provider is ProviderReachable=False within this many seconds."""


@pytest.fixture(scope="module", params=kinds())
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    """API server (double, or kube-apiserver with BANLIEUE_TEST_APISERVER=real) + one vcsim per sample Provider + manager; the sample Providers, classes and
    image applied (no VMs)."""
    tmp = tmp_path_factory.mktemp("vcenter-health")
    docs = [d for d in sample_documents(REPO / "config/samples") if d.get("kind") in KEEP]
    providers = [d["metadata"]["name"] for d in docs if d.get("kind") == "Provider"]
    with ExitStack() as stack:
        api = stack.enter_context(start_api_server(request.param, tmp, bookmark_interval=5.0))
        vcsims = {name: stack.enter_context(start_vcsim(host=4, guest_ip=GUEST_IP_RANGES[i % len(GUEST_IP_RANGES)]))
                  for i, name in enumerate(providers)}
        menv = start_manager_env(stack, tmp, api, vcsims)
        menv.docs = point_providers_at(docs, {n: (vc.url, vc.ca_pem) for n, vc in vcsims.items()})
        menv.kubectl_run("apply", *apply_flags(menv), "-f", "-", stdin=yaml.safe_dump_all(menv.docs))
        yield menv


def provider(env: ManagerEnv, name: str) -> dict[str, Any]:
    status, body = env.get(f"{PROVIDERS}/{name}")
    assert status == 200, body
    return dict(body)


def reachable(env: ManagerEnv, name: str) -> str | None:
    return condition(provider(env, name), "ProviderReachable").get("status")


def epoch(rfc3339: str) -> float:
    return float(calendar.timegm(time.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ")))


def test_hung_vcenter_is_noticed_in_seconds_and_gets_no_vm(env: ManagerEnv) -> None:
    for name in ("vcenter-a", "vcenter-b"):
        wait_for(f"{name} Ready", lambda n=name: condition(provider(env, n)).get("status") == "True", 60)  # type: ignore[misc]
    frozen = env.vcsims["vcenter-b"].process
    stopped_wall, stopped = time.time(), time.monotonic()
    os.kill(frozen.pid, signal.SIGSTOP)
    try:
        wait_for("vcenter-b ProviderReachable=False", lambda: reachable(env, "vcenter-b") == "False", 60, 0.2)
        detected = time.monotonic() - stopped
        cond = condition(provider(env, "vcenter-b"), "ProviderReachable")
        since = epoch(cond["lastTransitionTime"])
        print(f"\nhung vCenter: ProviderReachable=False after {detected:.1f} s; lastTransitionTime "
              f"{since - stopped_wall:+.1f} s from SIGSTOP; reason {cond['reason']}: {cond['message']}")
        assert detected <= DETECT_LIMIT, f"noticed after {detected:.1f} s"
        assert cond["reason"] == "ConnectFailed"
        # When it stopped answering (the first unanswered probe, sent at most one probe interval
        # after the freeze; metav1.Time has whole seconds), not when the reconcile ran.
        assert stopped_wall - 1 <= since <= stopped_wall + 5, (since, stopped_wall)

        vm = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine",
              "metadata": {"name": "while-frozen", "namespace": "default"},
              "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}}}
        status, body = env.request("POST", VMS, vm)
        assert status == 201, body

        def scheduled() -> str | None:
            _, got = env.get(f"{VMS}/while-frozen")
            name = ((got or {}).get("status") or {}).get("scheduled", {}).get("providerName")
            return str(name) if name else None

        assert wait_for("while-frozen scheduled", scheduled, 60) == "vcenter-a"
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    resumed = time.monotonic()
    wait_for("vcenter-b ProviderReachable=True", lambda: reachable(env, "vcenter-b") == "True", 60, 0.2)
    recovered = time.monotonic() - resumed
    print(f"hung vCenter: ProviderReachable=True {recovered:.1f} s after SIGCONT")
    assert recovered <= DETECT_LIMIT, f"recovered after {recovered:.1f} s"
