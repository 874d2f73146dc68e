"""crdgen: apiextensions.k8s.io/v1 CRDs generated from the pydantic models (``banlieue crdgen``).

The OpenAPI v3 schema of each kind is pydantic's JSON schema turned structural
(apiextensions "Specifying a structural schema"): every ``$ref`` is inlined, ``anyOf [X, null]``
(Python ``Optional``) becomes plain ``X``, ``const`` becomes a one-value ``enum``, titles and
``null`` defaults are dropped. Kubernetes markers (``x-kubernetes-list-type``, ``-list-map-keys``,
``-int-or-string``, ``-validations``) come from the models' ``json_schema_extra``.

Decisions: no node is ``nullable``. The API server prunes ``null`` from non-nullable fields
before defaulting, so a ``null`` in an apply patch means "absent" (and the default applies),
which is what every optional field here means. Nothing preserves unknown fields: template
metadata is typed (labels, annotations) like CAPI's.

Output is deterministic (definition order of the models, fixed YAML style) so CI can diff it.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from banlieue.api.kinds import CAPI_CONTRACT_LABEL, KindInfo, resource_kinds
from banlieue.api.render import dump_documents

_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_DROP_KEYS = frozenset({"title", "$defs"})


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``; CEL validation lists are concatenated, not replaced."""
    out = dict(base)
    for key, value in extra.items():
        if key == "x-kubernetes-validations" and key in out:
            out[key] = list(out[key]) + list(value)
        elif key == "description" and key in out:
            out[key] = value  # the field's description is more specific than the type's
        else:
            out[key] = value
    return out


def structural_schema(node: Any, defs: dict[str, Any]) -> Any:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 node (recursively)."""
    if isinstance(node, list):
        return [structural_schema(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = _merge(copy.deepcopy(target), node)
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and any(b == {"type": "null"} for b in any_of):
        rest = [b for b in any_of if b != {"type": "null"}]
        del node["anyOf"]
        if len(rest) != 1:
            raise ValueError(f"schema node is not structural (union of types): {any_of}")
        return structural_schema(_merge(rest[0], node), defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        raise ValueError(f"schema node is not structural (union of types): {node}")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if node.get("default", 0) is None:
        del node["default"]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP_KEYS:
            continue
        if key == "properties":
            out[key] = {name: structural_schema(sub, defs) for name, sub in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural_schema(value, defs)
        elif key == "anyOf":
            out[key] = value  # int-or-string branches are already plain
        else:
            out[key] = value
    if "properties" in out and "type" not in out:
        out["type"] = "object"
    return out


def _ordered(node: Any) -> Any:
    """Put ``description`` and ``type`` first in every node so the YAML reads naturally."""
    if isinstance(node, list):
        return [_ordered(n) for n in node]
    if not isinstance(node, dict):
        return node
    first = [k for k in ("description", "type") if k in node]
    rest = [k for k in node if k not in first]
    out: dict[str, Any] = {}
    for key in first + rest:
        value = node[key]
        if key == "properties":
            out[key] = {name: _ordered(sub) for name, sub in value.items()}
        elif key == "description" and isinstance(value, str):
            out[key] = value.replace("``", "")  # docstrings use reST literals; explain shows plain text
        else:
            out[key] = _ordered(value)
    return out


def openapi_schema(info: KindInfo) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one kind: structural, no ``$ref``, descriptions from docstrings."""
    raw = info.model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    props = raw["properties"]
    schema: dict[str, Any] = {
        "description": raw.get("description", ""),
        "type": "object",
        "properties": {
            "apiVersion": {"description": _API_VERSION_DOC, "type": "string"},
            "kind": {"description": _KIND_DOC, "type": "string"},
            "metadata": {"type": "object"},
        },
    }
    for part in ("spec", "status"):
        if part in props:
            schema["properties"][part] = structural_schema(props[part], defs)
    required = [r for r in raw.get("required", []) if r in ("spec", "status")]
    if required:
        schema["required"] = required
    if info.root_rules:
        schema["x-kubernetes-validations"] = [dict(r) for r in info.root_rules]
    ordered: dict[str, Any] = _ordered(schema)
    return ordered


def crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of one kind."""
    metadata: dict[str, Any] = {"name": info.crd_name}
    if info.contract_versions:
        # CAPI contract: the label value lists the contract-satisfying versions joined by "_".
        metadata["labels"] = {CAPI_CONTRACT_LABEL: "_".join(info.contract_versions)}
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": info.list_kind,
        "plural": info.plural,
        "singular": info.singular,
        "shortNames": list(info.short_names),
        "categories": list(info.categories),
    }
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(info)},
    }
    if info.status_subresource:
        version["subresources"] = {"status": {}}
    columns = []
    for col in info.printer_columns:
        entry: dict[str, Any] = {"name": col.name, "type": col.type, "jsonPath": col.json_path}
        if col.description:
            entry["description"] = col.description
        if col.priority:
            entry["priority"] = col.priority
        columns.append(entry)
    if columns:
        version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": info.group,
            "names": names,
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [version],
        },
    }


def crds() -> list[dict[str, Any]]:
    """Every CRD, in ``resource_kinds()`` order."""
    return [crd(info) for info in resource_kinds()]


def crd_filename(info: KindInfo) -> str:
    """``<group>_<plural>.yaml`` (kubebuilder's layout)."""
    return f"{info.group}_{info.plural}.yaml"


def write_crds(out: str) -> None:
    """Write one ``<group>_<plural>.yaml`` per kind into directory ``out`` (created if missing).

    Only CRDs: CI diffs ``config/crd`` against a fresh generation (hack/check-generated.sh);
    ``banlieue crdgen`` (banlieue.cmd.crdgen) adds the ``Kustomization`` listing them.
    """
    os.makedirs(out, exist_ok=True)
    for info in resource_kinds():
        with open(os.path.join(out, crd_filename(info)), "w", encoding="utf-8") as fh:
            fh.write(dump_documents([crd(info)]))
