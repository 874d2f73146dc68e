"""docs/operations.md stays complete: every flag, every condition reason, every exported metric."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import banlieue.backends.vsphere.metrics
import banlieue.runtime.metrics  # noqa: F401  (registers the metrics documented)
from banlieue.api.core import (
    ImageReason,
    ProviderConditionReason,
    VirtualMachineReason,
    VMImageConditionReason,
)
from banlieue.api.infrastructure import VSphereClusterReason, VSphereMachineReason
from banlieue.cmd.parser import DEV_FLAGS, ROLE_FLAGS, VSPHERE_FLAGS

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = (ROOT / "docs/operations.md").read_text()


def reasons(cls: type) -> set[str]:
    return {v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)}


def table_rows(text: str) -> set[str]:
    """The first cell of every Markdown table row, without backticks."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)`", text, re.MULTILINE)}


def section(title: str) -> str:
    start = OPERATIONS.index(title)
    end = OPERATIONS.find("\n### ", start + 1)
    return OPERATIONS[start:end if end != -1 else None]


REASON_SECTIONS: list[tuple[str, tuple[type, ...]]] = [
    ("### Provider", (ProviderConditionReason,)),
    ("### VMImage", (ImageReason, VMImageConditionReason)),
    ("### VirtualMachine", (VirtualMachineReason,)),
    ("### VSphereMachine", (VSphereMachineReason,)),
    ("### VSphereCluster", (VSphereClusterReason,)),
]
"""Each troubleshooting section and the API reason classes whose every value needs a row there."""


@pytest.mark.parametrize(("title", "classes"), REASON_SECTIONS, ids=[t[4:] for t, _ in REASON_SECTIONS])
def test_every_condition_reason_has_a_row(title: str, classes: tuple[type, ...]) -> None:
    wanted = set().union(*(reasons(cls) for cls in classes))
    assert wanted, f"{title}: no reasons found in {classes}"
    missing = wanted - table_rows(section(title))
    assert not missing, f"docs/operations.md {title} has no row for {sorted(missing)}"


def test_every_role_flag_and_env_is_documented() -> None:
    rows = table_rows(section("## Configuration"))
    documented = {row.split("[")[0] for row in rows}
    for spec in ROLE_FLAGS + VSPHERE_FLAGS:
        assert spec.flag in documented
        assert f"`{spec.env}`" in OPERATIONS
    assert {spec.flag for spec in DEV_FLAGS}.isdisjoint(documented), "dev flags belong to the README tour"


def test_every_exported_metric_is_documented() -> None:
    rows = table_rows(section("## Metrics"))
    exported = set()
    for name, collector in REGISTRY._names_to_collectors.items():
        module = type(collector).__module__
        if module.startswith("prometheus_client") and not name.endswith(("_created", "_bucket", "_sum", "_count")):
            exported.add(name)
    ours = {n for n in exported if n.startswith(("controller_runtime_", "workqueue_", "banlieue_",
                                                  "leader_election_", "rest_client_"))}
    # Counters register both <name> and <name>_total; the documented name is <name>_total.
    ours = {n for n in ours if f"{n}_total" not in ours}
    missing = {n for n in ours if n not in rows}
    assert not missing


def github_anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_relative_links_and_anchors_resolve() -> None:
    pages = [ROOT / "docs/concepts.md", ROOT / "docs/operations.md", ROOT / "README.md",
             *sorted((ROOT / "docs/decisions").glob("*.md"))]
    checked = 0
    for page in pages:
        base = page.parent
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            file = (base / path) if path else page
            assert file.is_file(), f"{page.name}: broken link {target}"
            if anchor:
                headings = re.findall(r"^#+ (.+)$", file.read_text(), re.MULTILINE)
                assert anchor in {github_anchor(h) for h in headings}, f"{page.name}: no anchor {target}"
            checked += 1
    assert checked > 10
