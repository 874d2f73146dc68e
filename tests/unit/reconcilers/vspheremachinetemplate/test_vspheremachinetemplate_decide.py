"""VSphereMachineTemplate decide: capacity and nodeInfo rules, index function, never-raise."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.api.infrastructure import VSphereMachineTemplate
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.vspheremachinetemplate.controller import Snapshot, decide, template_index


def vsmt(status: dict[str, Any] | None = None, **spec: Any) -> VSphereMachineTemplate:
    body: dict[str, Any] = {
        "apiVersion": "infrastructure.banlieue.io/v1alpha1",
        "kind": "VSphereMachineTemplate",
        "metadata": {"name": "md", "namespace": "ns"},
        "spec": {"template": {"spec": {"template": "ubuntu-22.04", "numCPUs": 4, "memoryMiB": 8192, **spec}}},
    }
    if status is not None:
        body["status"] = status
    return VSphereMachineTemplate.from_wire(body)


def image(name: str, ref: str = "ubuntu-22.04", cls: str = "vsphere", **spec: Any) -> VMImage:
    return VMImage.from_wire(
        {
            "apiVersion": "banlieue.io/v1alpha1",
            "kind": "VMImage",
            "metadata": {"name": name},
            "spec": {"sources": [{"providerClass": cls, "ref": ref}], **spec},
        }
    )


@pytest.mark.parametrize(
    ("template", "images", "want"),
    [
        pytest.param(vsmt(), (), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="no-image-defaults-amd64-linux"),
        pytest.param(vsmt(), (image("arm", architecture="arm64", osFamily="Linux"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}}, id="image-architecture"),
        pytest.param(vsmt(), (image("win", osFamily="windows"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "windows"}}, id="image-windows"),
        pytest.param(vsmt(), (image("bsd", architecture="arm64", osFamily="freebsd"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}}, id="unknown-os-family-is-linux"),
        pytest.param(vsmt(), (image("other", ref="rhel9", architecture="arm64"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="image-of-another-template-ignored"),
        pytest.param(vsmt(), (image("kv", cls="kubevirt", architecture="arm64"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="source-of-another-class-ignored"),
        pytest.param(vsmt(), (image("b", architecture="amd64"), image("a", architecture="arm64")), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "arm64", "operatingSystem": "linux"}}, id="several-images-first-by-name"),
        pytest.param(vsmt(numCPUs=None), (), {"capacity": {"memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="no-cpus-left-out"),
        pytest.param(vsmt(numCPUs=None, memoryMiB=None), (), {"nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="no-capacity-at-all"),
        pytest.param(vsmt(template=None), (image("arm", architecture="arm64"),), {"capacity": {"cpu": "4", "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}, id="no-template-name-defaults"),
    ],
)
def test_decide_status(template: VSphereMachineTemplate, images: tuple[VMImage, ...], want: dict[str, Any]) -> None:
    plan = decide(Snapshot(template, images))
    assert plan.status.to_wire() == want
    assert plan.write_status


def test_unchanged_status_is_not_written() -> None:
    first = decide(Snapshot(vsmt(), ()))
    again = decide(Snapshot(vsmt(status=first.status.to_wire()), ()))
    assert not again.write_status


def test_capacity_is_quantity_strings_and_an_integer_cpu_is_rewritten() -> None:
    """The cluster autoscaler reads status.capacity with ``unstructured.NestedStringMap``: a JSON
    number (``cpu: 4``, what banlieue wrote before) makes it ignore the whole map. Every value is a
    string, and a status stored with an integer is rewritten."""
    plan = decide(Snapshot(vsmt(), ()))
    assert all(isinstance(v, str) for v in (plan.status.to_wire()["capacity"] or {}).values())
    stored = {"capacity": {"cpu": 4, "memory": "8192Mi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}}
    again = decide(Snapshot(vsmt(status=stored), ()))
    assert again.write_status and again.status.to_wire()["capacity"] == {"cpu": "4", "memory": "8192Mi"}


def test_template_index() -> None:
    assert template_index(vsmt().to_wire()) == ["ubuntu-22.04"]
    assert template_index({"metadata": {"name": "x"}, "spec": {"template": {"spec": {}}}}) == []
    assert template_index({"metadata": {"name": "x"}}) == []


@given(
    cpus=st.none() | st.integers(1, 512),
    mem=st.none() | st.integers(1, 10**7),
    tmpl=st.none() | st.text(min_size=1, max_size=10),
    arch=st.sampled_from(["amd64", "arm64"]),
    family=st.none() | st.text(max_size=10),
    ref=st.text(min_size=1, max_size=10),
)
def test_decide_never_raises(cpus: int | None, mem: int | None, tmpl: str | None, arch: str, family: str | None, ref: str) -> None:
    plan = decide(Snapshot(vsmt(numCPUs=cpus, memoryMiB=mem, template=tmpl), (image("i", ref=ref, architecture=arch, osFamily=family),)))
    assert plan.status.node_info is not None
