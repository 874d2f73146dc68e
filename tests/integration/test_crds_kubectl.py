"""The generated CRDs and samples through kubectl against the API-server double (real HTTP).

``kubectl apply`` of config/crd and config/samples, read back unchanged but for the schema's
defaults (which must equal the models' defaults), and invalid objects rejected with 422 and a
field path. ``--validate=false``: the double serves no OpenAPI document, so client-side
validation is off and every check here is the server's.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from banlieue.api.kinds import kind_info, parse_object, resource_kinds

REPO = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
GROUPS = {k.group for k in resource_kinds()}

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed"),
    pytest.mark.timeout(120),
]


async def kubectl(apiserver: Any, *args: str) -> tuple[int, str, str]:
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--kubeconfig", str(apiserver.kubeconfig_path), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def install(apiserver: Any) -> None:
    # One file at a time: config/crd also holds Kustomization, which `apply -f DIR` rejects.
    files = sorted(str(p) for p in (REPO / "config" / "crd").glob("*.yaml") if p.name != "Kustomization")
    args = [a for f in files for a in ("-f", f)]
    code, out, err = await kubectl(apiserver, "apply", "--validate=false", *args)
    assert code == 0, err
    # "created" on a fresh double; on the real tier's shared server they are already installed.
    assert sum(out.count(word) for word in ("created", "configured", "unchanged")) == len(resource_kinds()), out


def _sample_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((REPO / "config" / "samples").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


async def test_samples_apply_and_read_back_with_model_defaults(apiserver: Any) -> None:
    await install(apiserver)
    code, _, err = await kubectl(apiserver, "apply", "--validate=false", "-f", "config/samples/")
    assert code == 0, err
    for doc in _sample_docs():
        if doc["apiVersion"].split("/")[0] not in GROUPS:
            continue
        info = kind_info(doc["kind"], doc["apiVersion"].split("/")[0])
        target = f"{info.plural}.{info.group}/{doc['metadata']['name']}"
        ns = ["-n", doc["metadata"]["namespace"]] if info.namespaced else []
        code, out, err = await kubectl(apiserver, "get", target, *ns, "-o", "json")
        assert code == 0, err
        got = json.loads(out)
        # The server's defaults are exactly the models' defaults: nothing else changed.
        assert got["spec"] == parse_object(doc).to_wire()["spec"], target
        assert got["metadata"].get("labels") == doc["metadata"].get("labels"), target
    code, out, _ = await kubectl(apiserver, "get", "bvm", "-n", "default")
    assert code == 0 and out.split()[:4] == ["NAME", "CLASS", "IMAGE", "PROVIDER"]


VM = {
    "apiVersion": "banlieue.io/v1alpha1",
    "kind": "VirtualMachine",
    "metadata": {"name": "bad", "namespace": "default"},
    "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}},
}
VMCLASS = {
    "apiVersion": "banlieue.io/v1alpha1",
    "kind": "VMClass",
    "metadata": {"name": "bad"},
    "spec": {"hardware": {"cpus": 2, "memoryMiB": 1024}},
}


def _spec(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**base, "spec": {**base["spec"], **spec}}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        pytest.param(
            "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines",
            {**VM, "spec": {"imageRef": {"name": "x"}}}, "spec.classRef", id="missing-required",
        ),
        pytest.param(
            "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines",
            _spec(VM, desiredPowerState="On"), "spec.desiredPowerState", id="bad-enum",
        ),
        pytest.param(
            "/apis/banlieue.io/v1alpha1/vmclasses",
            _spec(VMCLASS, hardware={"cpus": 0, "memoryMiB": 1024}), "spec.hardware.cpus", id="out-of-range",
        ),
        pytest.param(
            "/apis/banlieue.io/v1alpha1/vmclasses",
            _spec(VMCLASS, hardware={"cpus": "two", "memoryMiB": 1024}), "spec.hardware.cpus", id="wrong-type",
        ),
        pytest.param(
            "/apis/infrastructure.banlieue.io/v1alpha1/namespaces/default/vspheremachines",
            {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
             "metadata": {"name": "bad", "namespace": "default"}, "spec": {"powerOffMode": "gentle"}},
            "spec.powerOffMode", id="bad-enum-infra",
        ),
    ],
)
async def test_invalid_objects_rejected_with_422_and_field(
    apiserver: Any, path: str, body: dict[str, Any], field: str
) -> None:
    await install(apiserver)
    async with aiohttp.ClientSession() as session, session.post(apiserver.url.rstrip("/") + path, json=body) as resp:
        status = await resp.json()
    assert resp.status == 422, status
    assert status["reason"] == "Invalid"
    fields = [c.get("field") for c in status["details"]["causes"]]
    assert field in fields, status


async def test_printer_columns_read_status_through_the_status_subresource(apiserver: Any) -> None:
    await install(apiserver)
    code, _, err = await kubectl(apiserver, "apply", "--validate=false", "-f", "config/samples/virtualmachines.yaml")
    assert code == 0, err
    status = {
        "status": {
            "scheduled": {"providerName": "vcenter-a", "failureDomain": "vcenter-a-dc0-dc0-c0"},
            "observedPowerState": "PoweredOn",
            "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Provisioned", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }
    }
    url = apiserver.url.rstrip("/") + "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines/web-1/status"
    async with aiohttp.ClientSession() as session, session.patch(
        url, data=json.dumps(status), headers={"Content-Type": "application/merge-patch+json"}
    ) as resp:
        assert resp.status == 200, await resp.text()
    code, out, err = await kubectl(apiserver, "get", "virtualmachine", "web-1", "-n", "default")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    cells = dict(zip(header.split(), row.split(), strict=False))
    assert cells["PROVIDER"] == "vcenter-a"
    assert cells["FAILUREDOMAIN"] == "vcenter-a-dc0-dc0-c0"
    assert cells["POWER"] == "PoweredOn"
    assert cells["IP"] == "10.0.0.7"
    assert cells["READY"] == "True"


async def test_virtualmachine_names_longer_than_a_label_value_are_rejected(apiserver: Any) -> None:
    # The name becomes the VSphereMachine's banlieue.io/owned-by label value (at most 63
    # characters): a longer name could never be realised, so the CRD's root rule refuses it.
    await install(apiserver)
    path = apiserver.url.rstrip("/") + "/apis/banlieue.io/v1alpha1/namespaces/default/virtualmachines"
    async with aiohttp.ClientSession() as session:
        for name, expected in (("a" * 63, 201), ("a" * 64, 422), ("b" * 63 + "." + "c" * 60, 422)):
            body = {**VM, "metadata": {**VM["metadata"], "name": name}}
            async with session.post(path, json=body) as resp:
                status = await resp.json()
            assert resp.status == expected, status
            if expected == 422:
                assert status["reason"] == "Invalid" and "at most 63 characters" in status["message"], status
