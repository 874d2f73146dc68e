"""crddoc renders a complete, deterministic Markdown API reference that matches the CRDs (issue 8)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from banlieue.api import crddoc, crdgen
from banlieue.api.kinds import KindInfo, resource_kinds
from banlieue.cli import main
from banlieue.cmd.parser import CrddocCommand, parse_command

ROOT = Path(__file__).resolve().parents[3]
DOC = crddoc.render_reference()


def kind_section(kind: str) -> str:
    """The text of ``## <kind>`` up to the next kind heading."""
    start = DOC.index(f"\n## {kind}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end != -1 else None]


def type_section(name: str) -> str:
    """The text of ``### <name>`` up to the next heading of any level."""
    start = DOC.index(f"\n### {name}\n")
    end = DOC.find("\n#", start + 1)
    return DOC[start:end if end != -1 else None]


def rows(section: str) -> dict[str, list[str]]:
    """Field table rows of a section: wire name -> cells (Type, Default, Validation, Required, Description)."""
    out = {}
    for line in section.splitlines():
        match = re.match(r"^\| `([^`]+)` \| (.*) \|$", line)
        if match:
            out[match.group(1)] = [c.strip() for c in re.split(r"(?<!\\)\|", match.group(2))]
    return out


def nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every (path, node) of a structural schema below its object properties and list items."""
    out = []
    for name, sub in schema.get("properties", {}).items():
        out.append((f"{path}.{name}", sub))
        out += nodes(sub, f"{path}.{name}")
        if isinstance(sub.get("items"), dict):
            out += nodes(sub["items"], f"{path}.{name}[]")
    return out


def test_render_is_deterministic() -> None:
    assert crddoc.render_reference() == DOC
    assert DOC.endswith("\n") and not DOC.endswith("\n\n")


def test_committed_reference_is_fresh() -> None:
    committed = (ROOT / "docs/api-reference.md").read_text(encoding="utf-8")
    assert committed == DOC, "docs/api-reference.md is stale: run 'make generate'"


@pytest.mark.parametrize("info", resource_kinds(), ids=lambda i: i.kind)
def test_every_kind_has_its_facts_and_top_level_fields(info: KindInfo) -> None:
    section = kind_section(info.kind)
    assert f"| Group | `{info.group}` |" in section
    assert f"| Version | `{info.version}` |" in section
    assert f"| Scope | {'Namespaced' if info.namespaced else 'Cluster'} |" in section
    for short in info.short_names:
        assert f"`{short}`" in section.split("| Short names |")[1].splitlines()[0]
    assert f"| Status subresource | {'yes' if info.status_subresource else 'no'} |" in section
    for column in info.printer_columns:
        assert f"| {column.name} | {column.type} |" in section
    assert f"- [{info.kind}](#{info.kind.lower()})" in DOC  # table of contents

    schema = crdgen.openapi_schema(info)
    top = rows(section.split("\n### ")[0])
    assert set(schema["properties"]) <= set(top)
    for part in ("spec", "status"):
        if part not in schema["properties"]:
            continue
        link = re.fullmatch(r"\[(\w+)\]\(#(\w+)\)", top[part][0])
        assert link, f"{info.kind}.{part} does not link to its type: {top[part][0]}"
        assert link.group(2) == link.group(1).lower()
        fields = rows(type_section(link.group(1)))
        assert list(fields) == list(schema["properties"][part]["properties"])
        assert f"`{info.kind}.{part}`" in type_section(link.group(1))


def documented_rows() -> dict[str, list[str]]:
    """Full wire path (``Kind.spec.a[].b``) -> row cells, from the kind tables and "Appears at" lists."""
    out: dict[str, list[str]] = {}
    for info in resource_kinds():
        for name, cells in rows(kind_section(info.kind).split("\n### ")[0]).items():
            out[f"{info.kind}.{name}"] = cells
    for section in DOC.split("\n### ")[1:]:
        appears = re.search(r"^Appears at: (.*)\.$", section, re.MULTILINE)
        assert appears, section.splitlines()[0]
        for path in re.findall(r"`([^`]+)`", appears.group(1)):
            for name, cells in rows(section).items():
                out[f"{path}.{name}"] = cells
    return out


def test_every_field_of_every_crd_is_documented_with_enum_default_and_immutability() -> None:
    documented = documented_rows()
    checked = 0
    for info in resource_kinds():
        for path, node in nodes(crdgen.openapi_schema(info)):
            row = documented.get(f"{info.kind}{path}")
            assert row is not None, f"{info.kind}{path} missing"
            type_cell, default_cell, validation_cell = row[0], row[1], row[2]
            for value in node.get("enum", []):
                assert f"`{value}`" in type_cell, f"{info.kind}{path}: enum value {value}"
            if "default" in node:
                default = node["default"]
                shown = default if isinstance(default, str) and default else json.dumps(default)
                assert default_cell == f"`{shown}`", f"{info.kind}{path}: default"
            else:
                assert default_cell == ""
            rules = [r["rule"] for r in node.get("x-kubernetes-validations", [])]
            assert ("**immutable**" in validation_cell) == ("self == oldSelf" in rules), f"{info.kind}{path}"
            if "pattern" in node:
                assert "pattern" in validation_cell
            for key in node.get("x-kubernetes-list-map-keys", []):
                assert f"`{key}`" in type_cell
            checked += 1
    assert checked > 200  # the walk really covered the schemas


def test_known_rows() -> None:
    spec = rows(type_section("VirtualMachineSpec"))
    assert spec["desiredPowerState"][:2] == ["enum: `PoweredOn`, `PoweredOff`, `Suspended`", "`PoweredOn`"]
    assert spec["classRef"][0] == "[LocalObjectReference](#localobjectreference)"
    assert spec["classRef"][2] == "**immutable**" and spec["classRef"][3] == "yes"
    hardware = rows(type_section("Hardware"))
    assert "list-map, keys: `name`" in hardware["disks"][0]
    assert type_section("LocalObjectReference").count("`VirtualMachine.spec.classRef`") == 1
    resources = rows(type_section("VSphereMachineTemplateStatus"))
    assert "int-or-string" in resources["capacity"][0]
    assert "- `has(self.datastore) != has(self.datastoreCluster)`: exactly one of" in type_section("StorageTarget")
    assert "`vsphere://<BIOS UUID>`" in DOC and "slug(&lt;provider>" in DOC


def test_anchors_are_unique_and_every_link_resolves() -> None:
    headings = re.findall(r"^#{2,3} (.+)$", DOC, re.MULTILINE)
    anchors = [crddoc.slug(h) for h in headings]
    assert len(anchors) == len(set(anchors))
    for target in re.findall(r"\]\(#([^)]+)\)", DOC):
        assert target in anchors, target


def test_cli_writes_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "api-reference.md"
    assert main(["crddoc", "--out", str(out)], {}) == 0
    assert out.read_text(encoding="utf-8") == DOC


def test_cli_write_error_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "banlieue.cli", "crddoc", "--out", str(blocker / "api-reference.md")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("banlieue: error: crddoc: cannot write") and proc.stderr.count("\n") == 1


def test_parser_defaults_to_the_committed_path() -> None:
    assert parse_command(["crddoc"], {}) == CrddocCommand(out="docs/api-reference.md")
    assert parse_command(["crddoc", "--out", "x.md"], {}) == CrddocCommand(out="x.md")
