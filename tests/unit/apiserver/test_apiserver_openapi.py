"""OpenAPI v2/v3 documents: kube naming, GVK extensions, resolvable refs, fieldValidation params."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from banlieue.testing.apiserver.openapi import (
    crd_definition_name,
    openapi_v2,
    openapi_v3_doc,
    openapi_v3_index,
)

VM_SCHEMA = {
    "type": "object",
    "description": "VirtualMachine is a VM.",
    "properties": {
        "spec": {
            "type": "object",
            "description": "Desired state of the VM.",
            "properties": {
                "cpus": {"type": "integer", "description": "Number of vCPUs."},
                "note": {"type": "string", "nullable": True},
                "port": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}


def _crd(versions: list[str], scope: str = "Namespaced", schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "virtualmachines.banlieue.io"},
        "spec": {
            "group": "banlieue.io",
            "scope": scope,
            "names": {"kind": "VirtualMachine", "plural": "virtualmachines", "singular": "virtualmachine", "listKind": "VirtualMachineList"},
            "versions": [
                {"name": v, "served": v != "v0", "storage": i == 0, "schema": {"openAPIV3Schema": copy.deepcopy(schema or VM_SCHEMA)},
                 "subresources": {"status": {}}}
                for i, v in enumerate(versions)
            ],
        },
    }


CRDS = [_crd(["v1alpha1", "v1beta1", "v0"])]


@pytest.mark.parametrize(
    ("group", "version", "kind", "want"),
    [
        ("banlieue.io", "v1alpha1", "VirtualMachine", "io.banlieue.v1alpha1.VirtualMachine"),
        ("infrastructure.cluster.x-k8s.io", "v1beta2", "BanlieueCluster", "io.x-k8s.cluster.infrastructure.v1beta2.BanlieueCluster"),
    ],
    ids=["two-label-group", "capi-group"],
)
def test_crd_definition_name_reverses_group(group: str, version: str, kind: str, want: str) -> None:
    assert crd_definition_name(group, version, kind) == want


def _refs(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            out.append(node["$ref"])
        for v in node.values():
            out += _refs(v)
    elif isinstance(node, list):
        for v in node:
            out += _refs(v)
    return out


def test_v2_served_versions_and_gvk() -> None:
    doc = openapi_v2(CRDS)
    assert doc["swagger"] == "2.0"
    defs = doc["definitions"]
    for v in ("v1alpha1", "v1beta1"):
        d = defs[f"io.banlieue.{v}.VirtualMachine"]
        assert d["x-kubernetes-group-version-kind"] == [{"group": "banlieue.io", "kind": "VirtualMachine", "version": v}]
        assert defs[f"io.banlieue.{v}.VirtualMachineList"]["x-kubernetes-group-version-kind"][0]["kind"] == "VirtualMachineList"
    assert "io.banlieue.v0.VirtualMachine" not in defs  # not served
    for name in ("io.k8s.api.core.v1.ConfigMap", "io.k8s.api.core.v1.Secret", "io.k8s.api.core.v1.Namespace",
                 "io.k8s.api.core.v1.Event", "io.k8s.api.events.v1.Event", "io.k8s.api.coordination.v1.Lease",
                 "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
                 "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"):
        assert name in defs


def test_v2_refs_resolve_and_v2_compatible() -> None:
    doc = openapi_v2(CRDS)
    for ref in _refs(doc):
        assert ref.startswith("#/definitions/") and ref.removeprefix("#/definitions/") in doc["definitions"], ref
    spec = doc["definitions"]["io.banlieue.v1alpha1.VirtualMachine"]["properties"]["spec"]["properties"]
    assert "nullable" not in spec["note"] and "type" not in spec["note"]
    assert "anyOf" not in spec["port"]
    meta = doc["definitions"]["io.banlieue.v1alpha1.VirtualMachine"]["properties"]["metadata"]
    assert meta["$ref"] == "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _supports_field_validation(doc: dict[str, Any], gvk: dict[str, str]) -> bool:
    """kubectl QueryParamVerifierV3.supportsQueryParamV3, transcribed."""
    for path in doc["paths"].values():
        op = path.get("patch")
        if op is None or op.get("x-kubernetes-group-version-kind") != gvk:
            continue
        names = [p["name"] for p in op.get("parameters", [])] + [p["name"] for p in path.get("parameters", [])]
        return "fieldValidation" in names
    return False


RESOURCES = [
    ("crd-v1alpha1", "banlieue.io", "v1alpha1", "VirtualMachine"),
    ("crd-v1beta1", "banlieue.io", "v1beta1", "VirtualMachine"),
    ("configmap", "", "v1", "ConfigMap"),
    ("secret", "", "v1", "Secret"),
    ("namespace", "", "v1", "Namespace"),
    ("core-event", "", "v1", "Event"),
    ("events-event", "events.k8s.io", "v1", "Event"),
    ("lease", "coordination.k8s.io", "v1", "Lease"),
    ("crd", "apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
]


@pytest.mark.parametrize(("group", "version", "kind"), [r[1:] for r in RESOURCES], ids=[r[0] for r in RESOURCES])
def test_patch_paths_advertise_field_validation(group: str, version: str, kind: str) -> None:
    gvk = {"group": group, "kind": kind, "version": version}
    assert _supports_field_validation(openapi_v3_doc(group, version, CRDS), gvk)
    assert _supports_field_validation(openapi_v2(CRDS), gvk)


def test_crd_paths_namespaced_and_status() -> None:
    paths = openapi_v3_doc("banlieue.io", "v1alpha1", CRDS)["paths"]
    base = "/apis/banlieue.io/v1alpha1/namespaces/{namespace}/virtualmachines"
    assert {base, base + "/{name}", base + "/{name}/status", "/apis/banlieue.io/v1alpha1/virtualmachines"} <= set(paths)
    assert paths[base + "/{name}"]["patch"]["x-kubernetes-action"] == "patch"
    assert "application/apply-patch+yaml" in paths[base + "/{name}"]["patch"]["requestBody"]["content"]


SMP = "application/strategic-merge-patch+json"


def test_strategic_merge_only_for_builtin_kinds() -> None:
    # kubectl sends strategic merge whenever a PATCH advertises it; custom resources answer 415.
    cr = openapi_v3_doc("banlieue.io", "v1alpha1", CRDS)["paths"]
    for path in ("/apis/banlieue.io/v1alpha1/namespaces/{namespace}/virtualmachines/{name}",
                 "/apis/banlieue.io/v1alpha1/namespaces/{namespace}/virtualmachines/{name}/status"):  # fmt: skip
        assert SMP not in cr[path]["patch"]["requestBody"]["content"]
    core = openapi_v3_doc("", "v1", CRDS)["paths"]
    assert SMP in core["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]["requestBody"]["content"]
    v2 = openapi_v2(CRDS)["paths"]
    assert SMP not in v2["/apis/banlieue.io/v1alpha1/namespaces/{namespace}/virtualmachines/{name}"]["patch"]["consumes"]
    assert SMP in v2["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]["consumes"]


def test_cluster_scoped_paths() -> None:
    paths = openapi_v3_doc("banlieue.io", "v1alpha1", [_crd(["v1alpha1"], scope="Cluster")])["paths"]
    assert "/apis/banlieue.io/v1alpha1/virtualmachines/{name}" in paths
    assert not any("namespaces/{namespace}" in p for p in paths)


def test_v3_doc_components_for_explain() -> None:
    doc = openapi_v3_doc("banlieue.io", "v1alpha1", CRDS)
    assert doc["openapi"].startswith("3.")
    schemas = doc["components"]["schemas"]
    vm = schemas["io.banlieue.v1alpha1.VirtualMachine"]
    assert vm["description"] == "VirtualMachine is a VM."
    assert vm["properties"]["spec"]["properties"]["cpus"]["description"] == "Number of vCPUs."
    assert vm["properties"]["spec"]["properties"]["note"]["nullable"] is True  # v3 keeps nullable
    assert vm["properties"]["metadata"]["allOf"] == [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]
    assert "io.banlieue.v1beta1.VirtualMachine" not in schemas  # other version, other document
    for ref in _refs(doc):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref


def test_v3_core_doc_has_only_core_kinds() -> None:
    doc = openapi_v3_doc("", "v1", CRDS)
    kinds = {g["kind"] for s in doc["components"]["schemas"].values() for g in s.get("x-kubernetes-group-version-kind", [])}
    assert {"ConfigMap", "Secret", "Namespace", "Event", "ServiceAccount"} <= kinds
    assert "VirtualMachine" not in kinds and "Lease" not in kinds
    assert all(p.startswith("/api/v1/") for p in doc["paths"])


def test_v3_index_urls_and_hash() -> None:
    gvs = ["api/v1", "apis/banlieue.io/v1alpha1", "apis/coordination.k8s.io/v1"]
    idx = openapi_v3_index(gvs, CRDS)
    assert set(idx["paths"]) == set(gvs)
    for gv, entry in idx["paths"].items():
        assert re.fullmatch(rf"/openapi/v3/{re.escape(gv)}\?hash=[0-9A-F]{{128}}", entry["serverRelativeURL"])
    assert openapi_v3_index(gvs, CRDS) == idx  # stable
    changed = _crd(["v1alpha1", "v1beta1"], schema={**VM_SCHEMA, "description": "changed"})
    idx2 = openapi_v3_index(gvs, [changed])
    gv = "apis/banlieue.io/v1alpha1"
    assert idx2["paths"][gv] != idx["paths"][gv]
    assert idx2["paths"]["api/v1"] == idx["paths"]["api/v1"]


def test_v3_index_accepts_short_group_versions() -> None:
    assert set(openapi_v3_index(["v1", "banlieue.io/v1alpha1"], CRDS)["paths"]) == {"api/v1", "apis/banlieue.io/v1alpha1"}
