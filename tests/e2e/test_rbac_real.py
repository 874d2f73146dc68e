"""RBAC is the truth (kube-apiserver only): with one rule taken out of the generated ClusterRole,
``banlieue manager`` (ServiceAccount token bound to config/rbac) fails loudly, naming the verb
and the resource it was refused, instead of silently doing less.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from banlieue.testing.apiservers import ApiServerUnderTest, selected, start_api_server
from banlieue.testing.envtest import envtest_binaries_missing
from banlieue.testing.stack import BanlieueProcess, start_banlieue, wait_for

from .harness import kubectl_path

pytestmark = [
    pytest.mark.kubectl, pytest.mark.timeout(120),
    pytest.mark.skipif(kubectl_path() is None, reason="kubectl not installed"),
    pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing())),
    pytest.mark.skipif(selected() == "double", reason="RBAC exists only on kube-apiserver"),
]

ROLE = "banlieue-controller"
REMOVED = {"apiGroups": ["banlieue.io"], "resources": ["virtualmachines/status"], "verbs": ["patch"]}
USER = "system:serviceaccount:banlieue-system:banlieue-manager"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApiServerUnderTest, BanlieueProcess]]:
    """envtest with banlieue installed; the manager's ClusterRole lacks ``patch
    virtualmachines/status``; the manager runs with its ServiceAccount token."""
    kubectl = kubectl_path()
    assert kubectl is not None
    tmp = tmp_path_factory.mktemp("rbac")
    with ExitStack() as stack:
        server = stack.enter_context(start_api_server("real", tmp))
        server.install(kubectl)
        kubeconfig = server.manager_kubeconfig(kubectl, tmp)
        role = json.loads(server.kubectl(kubectl, "get", "clusterrole", ROLE, "-o", "json").stdout)
        rules = [r for r in role["rules"] if {k: r.get(k) for k in REMOVED} != REMOVED]
        assert len(rules) == len(role["rules"]) - 1, f"rule {REMOVED} not in {ROLE}"
        role["rules"] = rules
        proc = server.kubectl(kubectl, "replace", "-f", "-", stdin=json.dumps(role))
        assert proc.returncode == 0, proc.stderr
        manager = start_banlieue(kubeconfig, tmp / "manager.log", log_format="json")
        stack.callback(manager.stop)
        manager.wait_ready(40)
        yield server, manager


def _vm(name: str) -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": "default"},
            "spec": {"classRef": {"name": "missing"}, "imageRef": {"name": "missing"}}}


def test_a_missing_rule_is_an_error_naming_verb_and_resource(api: tuple[ApiServerUnderTest, BanlieueProcess]) -> None:
    server, manager = api
    status, body = server.request("POST", "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines", _vm("no-status"))
    assert status == 201, body
    wanted = 'cannot patch resource \\"virtualmachines/status\\" in API group \\"banlieue.io\\"'

    def error_lines() -> list[dict[str, Any]]:
        out = []
        for line in manager.log.read_text(errors="replace").splitlines():
            if wanted in line:
                out.append(json.loads(line))
        return out

    lines = wait_for("an error log line naming patch virtualmachines/status", error_lines, 45)
    assert any(entry.get("level") == "error" for entry in lines), lines[0]
    assert server.envtest is not None
    denied = [e for e in server.envtest.forbidden()
              if e["user"]["username"] == USER and e["objectRef"].get("subresource") == "status"]
    assert denied and all(e["verb"] == "patch" and e["objectRef"]["resource"] == "virtualmachines" for e in denied)
