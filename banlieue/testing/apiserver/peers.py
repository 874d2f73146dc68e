"""Late binding to the pure helper modules (schema, ssa, tables, openapi) with minimal fallbacks.

Those modules are written alongside this package; until one is importable the fallback here keeps
the server working with reduced fidelity (no schema validation, a single managedFields entry per
manager, a Name/Age table, an empty OpenAPI document).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

JSON = dict[str, Any]


def peer(name: str) -> ModuleType | None:
    """The sibling module ``name`` or None when it is not importable yet."""
    try:
        return importlib.import_module(f"banlieue.testing.apiserver.{name}")
    except ImportError:
        return None


def to_table(objs: list[JSON], columns: list[JSON] | None, *, list_rv: str, continue_token: str | None,
             include_object: str) -> JSON:
    """meta.k8s.io/v1 Table via tables.py, or a Name/Age table while it is missing."""
    mod = peer("tables")
    if mod is not None:
        out: JSON = mod.to_table(objs, columns, list_rv=list_rv, continue_token=continue_token,
                                 include_object=include_object)
        return out
    rows = []
    for o in objs:
        md = o.get("metadata", {})
        row: JSON = {"cells": [md.get("name", ""), md.get("creationTimestamp", "")]}
        if include_object == "Object":
            row["object"] = o
        elif include_object == "Metadata":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md}
        rows.append(row)
    meta: JSON = {"resourceVersion": list_rv}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0},
            {"name": "Age", "type": "date", "format": "", "description": "Age", "priority": 0},
        ],
        "rows": rows,
    }
