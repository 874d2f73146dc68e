"""kubectl (1.32, and the oldest and newest on the machine) as a real client of the double."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from banlieue.testing.apiserver.fixture import ApiServerHandle

from .conftest import WIDGET_CRD, Http

pytestmark = pytest.mark.kubectl

KUBECTLS = {
    "1.32": "/usr/bin/kubectl",
    "1.27": "/usr/lib/google-cloud-sdk/bin/kubectl.1.27",
    "1.33": "/usr/lib/google-cloud-sdk/bin/kubectl.1.33",
}


@dataclass
class Kubectl:
    binary: str
    kubeconfig: Path
    cache: Path
    workdir: Path

    async def run(self, *args: str, stdin: str | None = None, ok: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache), *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(self.workdir)},
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        rc = proc.returncode or 0
        if ok:
            assert rc == 0, f"kubectl {' '.join(args)} failed: {err.decode()}"
        return rc, out.decode(), err.decode()

    async def apply(self, obj: object, *extra: str, ok: bool = True) -> tuple[int, str, str]:
        return await self.run("apply", "-f", "-", *extra, stdin=yaml.safe_dump(obj), ok=ok)


@pytest.fixture(params=sorted(KUBECTLS), ids=lambda v: f"kubectl-{v}")
def kubectl(request: pytest.FixtureRequest, apiserver: ApiServerHandle, tmp_path: Path) -> Kubectl:
    binary = KUBECTLS[request.param]
    if not os.access(binary, os.X_OK):
        pytest.skip(f"{binary} not installed")
    return Kubectl(binary, apiserver.kubeconfig_path, tmp_path / "cache", tmp_path)


def widget_doc(size: int, **spec: object) -> dict[str, object]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"},
            "spec": {"size": size, **spec}}


async def test_crd_and_custom_resource_lifecycle(kubectl: Kubectl, http: Http) -> None:
    _, out, _ = await kubectl.apply(WIDGET_CRD)
    assert "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created" in out
    await kubectl.run("wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=10s")
    _, out, _ = await kubectl.apply(widget_doc(2))
    assert "widget.example.com/w1 created" in out
    _, out, _ = await kubectl.apply(widget_doc(2))
    assert "unchanged" in out
    _, out, _ = await kubectl.apply(widget_doc(3))
    assert "configured" in out
    _, out, _ = await kubectl.run("get", "wd")
    header, row = out.splitlines()[:2]
    assert header.split()[:2] == ["NAME", "SIZE"] and row.split()[:2] == ["w1", "3"]
    _, out, _ = await kubectl.run("get", "widgets", "w1", "-o", "yaml")
    obj = yaml.safe_load(out)
    assert obj["spec"] == {"size": 3, "color": "red"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in obj["metadata"]["annotations"]
    assert obj["metadata"]["generation"] == 2
    await kubectl.run("label", "wd", "w1", "env=prod")
    await kubectl.run("annotate", "wd", "w1", "note=hi")
    _, out, _ = await kubectl.run("get", "wd", "-l", "env=prod", "-o", "name")
    assert out.strip() == "widget.example.com/w1"
    await kubectl.run("patch", "wd", "w1", "--type", "merge", "-p", '{"spec":{"size":5}}')
    await kubectl.run("patch", "wd", "w1", "--type", "json", "-p", '[{"op":"add","path":"/spec/tags","value":["a"]}]')
    _, out, _ = await kubectl.run("get", "wd", "w1", "-o", "jsonpath={.spec.size} {.spec.tags[0]} {.metadata.labels.env}")
    assert out == "5 a prod"
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Done", "message": "",
                                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    code, _, _ = await http.patch("/apis/example.com/v1/namespaces/default/widgets/w1/status", status,
                                  "application/merge-patch+json")
    assert code == 200
    await kubectl.run("wait", "--for=condition=Ready", "wd/w1", "--timeout=10s")
    _, out, _ = await kubectl.run("describe", "wd", "w1")
    assert "Name:" in out and "w1" in out and "Size:" in out
    _, out, _ = await kubectl.run("explain", "widgets.spec")
    assert "size" in out and "color" in out
    _, out, _ = await kubectl.run("delete", "wd", "w1")
    assert 'widget.example.com "w1" deleted' in out
    rc, _, err = await kubectl.run("get", "wd", "w1", ok=False)
    assert rc != 0 and 'Error from server (NotFound): widgets.example.com "w1" not found' in err


async def test_validation_errors_through_kubectl(kubectl: Kubectl, widgets: Http) -> None:
    rc, _, err = await kubectl.apply(widget_doc(0), ok=False)
    assert rc != 0 and "spec.size" in err and "should be greater than or equal to 1" in err
    rc, _, err = await kubectl.apply(widget_doc(1, color="green"), ok=False)
    assert rc != 0 and 'Unsupported value: "green"' in err
    bad = copy.deepcopy(widget_doc(1))
    bad["spec"]["bogus"] = 1  # type: ignore[index]
    rc, _, err = await kubectl.apply(bad, ok=False)
    assert rc != 0 and 'unknown field "spec.bogus"' in err
    _, out, err = await kubectl.apply(bad, "--validate=warn")
    assert "created" in out and 'Warning: unknown field "spec.bogus"' in err


async def test_server_side_apply_through_kubectl(kubectl: Kubectl, widgets: Http) -> None:
    _, out, _ = await kubectl.apply(widget_doc(2), "--server-side", "--field-manager", "alice")
    assert "serverside-applied" in out
    rc, _, err = await kubectl.apply(widget_doc(4), "--server-side", "--field-manager", "bob", ok=False)
    assert rc != 0 and "conflict" in err.lower() and ".spec.size" in err
    _, out, _ = await kubectl.apply(widget_doc(4), "--server-side", "--field-manager", "bob", "--force-conflicts")
    assert "serverside-applied" in out
    _, out, _ = await kubectl.run("get", "wd", "w1", "-o", "json", "--show-managed-fields")
    managers = {e["manager"] for e in json.loads(out)["metadata"]["managedFields"]}
    assert "bob" in managers


async def test_builtin_kinds_through_kubectl(kubectl: Kubectl, http: Http) -> None:
    _, out, _ = await kubectl.run("create", "namespace", "team")
    assert "namespace/team created" in out
    await kubectl.run("create", "configmap", "c1", "-n", "team", "--from-literal=a=b")
    await kubectl.run("create", "secret", "generic", "s1", "-n", "team", "--from-literal=password=pw")
    _, out, _ = await kubectl.run("get", "secret", "s1", "-n", "team", "-o", "jsonpath={.type} {.data.password}")
    assert out == "Opaque cHc="
    _, out, _ = await kubectl.run("get", "cm", "-n", "team")
    assert out.splitlines()[0].split() == ["NAME", "DATA", "AGE"] and out.splitlines()[1].split()[:2] == ["c1", "1"]
    _, out, _ = await kubectl.run("get", "ns")
    assert {"default", "kube-system", "kube-public", "team"} <= {ln.split()[0] for ln in out.splitlines()[1:]}
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "c1.1", "namespace": "team"},
          "involvedObject": {"kind": "ConfigMap", "name": "c1", "namespace": "team", "apiVersion": "v1"},
          "reason": "Tested", "message": "hello from the test", "type": "Normal",
          "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
          "source": {"component": "pytest"}}
    code, _, _ = await http.post("/api/v1/namespaces/team/events", ev)
    assert code == 201
    new_style = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "c1.2", "namespace": "team"},
                 "eventTime": "2026-01-01T00:00:01.000000Z", "reportingController": "banlieue.io/controller",
                 "reportingInstance": "r1", "action": "Reconcile", "reason": "Converted", "type": "Warning",
                 "regarding": {"kind": "ConfigMap", "name": "c1", "namespace": "team", "apiVersion": "v1"},
                 "note": "written through events.k8s.io"}
    code, _, _ = await http.post("/apis/events.k8s.io/v1/namespaces/team/events", new_style)
    assert code == 201
    _, out, _ = await kubectl.run("events", "-n", "team")
    assert "hello from the test" in out and "Tested" in out
    assert "written through events.k8s.io" in out and "Converted" in out
    _, out, _ = await kubectl.run("get", "events", "-n", "team")
    assert "hello from the test" in out
    rc, _, err = await kubectl.run("get", "cm", "nope", "-n", "team", ok=False)
    assert rc != 0 and 'Error from server (NotFound): configmaps "nope" not found' in err
    rc, _, err = await kubectl.run("create", "configmap", "c1", "-n", "team", ok=False)
    assert rc != 0 and 'configmaps "c1" already exists' in err
    _, out, _ = await kubectl.run("delete", "namespace", "team", "--timeout=20s")
    assert 'namespace "team" deleted' in out
    rc, _, _ = await kubectl.run("get", "ns", "team", ok=False)
    assert rc != 0


async def test_client_side_apply_of_builtin_uses_strategic_merge(kubectl: Kubectl) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "labels": {"a": "1"}},
          "data": {"k": "v"}}
    await kubectl.apply(cm)
    cm["data"] = {"k": "v2", "k2": "x"}
    _, out, _ = await kubectl.apply(cm)
    assert "configmap/applied configured" in out
    _, out, _ = await kubectl.run("get", "cm", "applied", "-o", "json")
    assert json.loads(out)["data"] == {"k": "v2", "k2": "x"}


async def test_watch_wait_delete_and_categories(kubectl: Kubectl, widgets: Http) -> None:
    await kubectl.apply(widget_doc(2))
    _, out, _ = await kubectl.run("get", "all-widgets", "-o", "name")
    assert out.strip() == "widget.example.com/w1"
    proc = await asyncio.create_subprocess_exec(
        kubectl.binary, "--kubeconfig", str(kubectl.kubeconfig), "--cache-dir", str(kubectl.cache),
        "get", "wd", "-w", "--request-timeout=3s", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await asyncio.sleep(1.0)
    await kubectl.run("patch", "wd", "w1", "--type", "merge", "-p", '{"spec":{"size":7}}')
    out_b, _ = await asyncio.wait_for(proc.communicate(), 15)
    rows = [ln.split() for ln in out_b.decode().splitlines()]
    assert rows[0][:2] == ["NAME", "SIZE"] and ["w1", "2"] == rows[1][:2] and ["w1", "7"] in [r[:2] for r in rows]
    waiter = asyncio.create_task(kubectl.run("wait", "--for=delete", "wd/w1", "--timeout=15s"))
    await asyncio.sleep(0.5)
    await kubectl.run("delete", "wd", "w1", "--wait=false")
    rc, out, _ = await waiter
    assert rc == 0


async def test_auth_can_i_is_always_yes(kubectl: Kubectl) -> None:
    _, out, _ = await kubectl.run("auth", "can-i", "delete", "configmaps", "-n", "default")
    assert out.strip() == "yes"


async def test_rbac_and_admission_objects_are_stored(kubectl: Kubectl) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "read", "namespace": "default"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]}
    _, out, _ = await kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump_all([role, binding]))
    assert "clusterrole.rbac.authorization.k8s.io/reader created" in out
    assert "rolebinding.rbac.authorization.k8s.io/read created" in out
    _, out, _ = await kubectl.run("get", "clusterrole", "reader", "-o", "jsonpath={.rules[0].verbs}")
    assert json.loads(out) == ["get", "list"]
    vap = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
           "metadata": {"name": "p"}, "spec": {"failurePolicy": "Fail", "validations": [{"expression": "true"}]}}
    _, out, _ = await kubectl.apply(vap)
    assert "validatingadmissionpolicy.admissionregistration.k8s.io/p created" in out
