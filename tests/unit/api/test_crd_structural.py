"""crdgen output is a structural, deterministic apiextensions.k8s.io/v1 CRD set (SPEC §1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from banlieue.api import crdgen
from banlieue.api.kinds import KindInfo, resource_kinds

REPO = Path(__file__).resolve().parents[3]
KINDS = resource_kinds()
IDS = [k.kind for k in KINDS]


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.get("properties", {}).items():
            yield from _walk(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("info", KINDS, ids=IDS)
def test_schema_is_structural(info: KindInfo) -> None:
    schema = crdgen.openapi_schema(info)
    assert "$ref" not in yaml.safe_dump(schema)
    for path, node in _walk(schema):
        assert "title" not in node, path
        assert "nullable" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, path
        assert "anyOf" not in node and "oneOf" not in node and "allOf" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item["properties"], (path, key)
                assert key in item.get("required", []) or "default" in item["properties"][key], (path, key)


def test_generated_files_are_committed_and_fresh(tmp_path: Path) -> None:
    crdgen.write_crds(str(tmp_path))
    fresh = {p.name: p.read_text() for p in tmp_path.iterdir()}
    committed = {
        p.name: p.read_text() for p in (REPO / "config" / "crd").glob("*.yaml") if p.name != "Kustomization"
    }
    assert fresh == committed


def test_generation_is_deterministic(tmp_path: Path) -> None:
    crdgen.write_crds(str(tmp_path / "a"))
    crdgen.write_crds(str(tmp_path / "b"))
    for first in (tmp_path / "a").iterdir():
        assert first.read_bytes() == (tmp_path / "b" / first.name).read_bytes()
