"""The shipped samples are consistent (issue 21, item 1): every failure domain the ``demo``
VSphereCluster advertises can take a machine.

Real processes: the API server, one vcsim per sample Provider, ``banlieue manager``; config/samples
applied with kubectl (``harness.samples_env``). The API server plays no part in placement: plain
``make test`` runs it on kube-apiserver only (it ran on the double too: one more environment, about
a minute); ``BANLIEUE_TEST_APISERVER`` picks the server. Before the fix the demo advertised all 12
domains and a machine in ``vcenter-b-dc1-*`` failed ``InvalidSpec: port group 'DC0_DVPG0' not
found in datacenter 'DC1'``. Now: 9 advertised, the 3 of vcenter-b's DC1 excluded with why, and
a VSphereMachine of the sample template placed in every advertised domain becomes Ready in vcsim.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from banlieue.testing.apiservers import kinds

from .harness import ManagerEnv, condition, requirements_skip, samples_env, wait_for

pytestmark = [pytest.mark.vcsim, pytest.mark.kubectl, pytest.mark.timeout(300), requirements_skip()]

INFRA = "/apis/infrastructure.banlieue.io/v1alpha1/namespaces/default"


@pytest.fixture(scope="module", params=kinds(real_by_default=True))
def placement_env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagerEnv]:
    """``harness.samples_env`` on kube-apiserver (``BANLIEUE_TEST_APISERVER``: the one chosen)."""
    yield from samples_env(request.param, tmp_path_factory)


def test_every_advertised_domain_takes_a_machine(placement_env: ManagerEnv) -> None:
    env = placement_env

    def demo() -> dict[str, Any] | None:
        status, body = env.get(f"{INFRA}/vsphereclusters/demo")
        if status != 200:
            return None
        st = body.get("status") or {}
        return body if len(st.get("failureDomains") or []) + len(st.get("excludedFailureDomains") or []) == 12 else None

    cluster = wait_for("demo lists all 12 domains (advertised or excluded)", demo, 90)
    advertised = sorted(d["name"] for d in cluster["status"]["failureDomains"])
    left_out = {e["name"]: e["message"] for e in cluster["status"]["excludedFailureDomains"]}
    assert len(advertised) == 9 and all(not n.startswith("vcenter-b-dc1") for n in advertised), advertised
    assert sorted(left_out) == [f"vcenter-b-dc1-dc1-c{i}" for i in range(3)], left_out
    assert all("networkClass default" in m for m in left_out.values()), left_out

    _, template = env.get(f"{INFRA}/vspheremachinetemplates/demo-md-0")
    for name in advertised:
        spec = copy.deepcopy(template["spec"]["template"]["spec"])
        spec["failureDomain"] = name
        body = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
                "metadata": {"name": f"in-{name}", "namespace": "default"}, "spec": spec}
        status, out = env.request("POST", f"{INFRA}/vspheremachines", body)
        assert status == 201, out

    def states() -> dict[str, tuple[str, str]]:
        _, listed = env.get(f"{INFRA}/vspheremachines")
        out = {}
        for m in (listed or {}).get("items", []):
            if m["metadata"]["name"].startswith("in-"):
                c = condition(m, "Ready")
                out[m["metadata"]["name"]] = (c.get("status", ""), c.get("reason", ""))
        return out

    def all_ready() -> dict[str, tuple[str, str]] | None:
        now = states()
        bad = {n: s for n, s in now.items() if s[1] in ("InvalidSpec", "CloneFailed", "TemplateNotFound")}
        assert not bad, f"machines refused in advertised domains: {bad}"
        return now if len(now) == len(advertised) and all(s[0] == "True" for s in now.values()) else None

    wait_for("a Ready machine in every advertised domain", all_ready, 240, 1.0)
