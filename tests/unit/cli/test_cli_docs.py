"""docs/operations.md stays complete: every flag, every condition reason, every exported metric.

Condition reasons cannot drift: every reason class in ``banlieue.api`` has a documented section,
every value a row, and the reconcilers' source holds no CamelCase literal (a would-be reason)
that is not one of those constants, a backend error reason, a kind, or another listed wire word.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import banlieue.api
import banlieue.backends.vsphere.metrics
import banlieue.reconcilers.kinds
import banlieue.reconcilers.metrics
import banlieue.runtime.kinds
import banlieue.runtime.metrics  # registers the metrics documented (as does the vsphere one)
from banlieue.api.conditions import PAUSED, READY
from banlieue.api.core import (
    ImageReason,
    ProviderConditionReason,
    VirtualMachineReason,
    VMImageConditionReason,
)
from banlieue.api.infrastructure import VSphereClusterReason, VSphereMachineReason
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import PROVIDER_REACHABLE
from banlieue.api.virtualmachine import PowerState, VirtualMachineConditionType
from banlieue.cmd.parser import DEV_FLAGS, ROLE_FLAGS, VSPHERE_FLAGS

ROOT = Path(__file__).resolve().parents[3]
OPERATIONS = (ROOT / "docs/operations.md").read_text()


def reasons(cls: type) -> set[str]:
    return {v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)}


def table_rows(text: str) -> set[str]:
    """The first cell of every Markdown table row, without backticks."""
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)`", text, re.MULTILINE)}


def section(title: str) -> str:
    """From ``title`` to the next heading of level 2 or 3."""
    start = OPERATIONS.index(title)
    ends = [e for e in (OPERATIONS.find("\n### ", start + 1), OPERATIONS.find("\n## ", start + 1)) if e != -1]
    return OPERATIONS[start:min(ends) if ends else None]


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


# --- reason literals in the reconcilers -------------------------------------------------------

RECONCILERS = ROOT / "banlieue/reconcilers"
BACKENDS = ROOT / "banlieue/backends"
CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")
"""A CamelCase word (condition reasons, event reasons, kinds); ``GET``/``ERROR`` are not."""

OTHER_WORDS = {
    "NoBackend": "gather failure reason when the role runs without a vSphere backend (mapped to a reason)",
    "Template": "VMImage sources[].kind",
    "NotReady": "message text for a VMImage row without a reason",
}
"""CamelCase literals of the reconcilers that are neither reasons nor derived below, and why."""


def api_reason_classes() -> set[type]:
    """Every class named ``*Reason`` defined in a ``banlieue.api`` module."""
    out: set[type] = set()
    for info in pkgutil.iter_modules(banlieue.api.__path__):
        module = importlib.import_module(f"banlieue.api.{info.name}")
        out |= {obj for name, obj in vars(module).items()
                if isinstance(obj, type) and name.endswith("Reason") and obj.__module__ == module.__name__}
    return out


def camel_literals(source: str) -> Iterator[tuple[str, int]]:
    """(literal, line) of every CamelCase string constant, except f-string fragments (messages)
    and ``__all__`` entries."""
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip |= {id(v) for v in node.values}
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip |= {id(v) for v in ast.walk(node.value)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip and CAMEL.match(node.value):
            yield node.value, node.lineno


def backend_reasons() -> set[str]:
    """``BackendError.reason`` values the backends raise: ``reason = "X"`` class attributes and
    ``reason="X"`` keyword arguments (the reconcilers compare against them)."""
    out: set[str] = set()
    for path in BACKENDS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "reason" and isinstance(node.value, ast.Constant):
                out.add(str(node.value.value))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    any(isinstance(t, ast.Name) and t.id == "reason" for t in node.targets):
                out.add(str(node.value.value))
    return out


def documented_event_reasons() -> set[str]:
    """Every backticked word in the first cell of the Events table."""
    cells = re.findall(r"^\| ([^|]+) \|", section("### Events"), re.MULTILINE)
    return {word for cell in cells for word in re.findall(r"`([^`]+)`", cell)}


def known_words() -> set[str]:
    kinds = {v.kind for mod in (banlieue.reconcilers.kinds, banlieue.runtime.kinds) for v in vars(mod).values()
             if isinstance(v, banlieue.runtime.kinds.ResourceKind)}
    phases = {banlieue.reconcilers.metrics.PENDING, banlieue.reconcilers.metrics.PROVISIONING,
              banlieue.reconcilers.metrics.READY, banlieue.reconcilers.metrics.DELETING, banlieue.reconcilers.metrics.FAILED}
    condition_types = reasons(VirtualMachineConditionType) | {READY, PAUSED, PROVIDER_REACHABLE}
    return (set().union(*(reasons(cls) for cls in api_reason_classes())) | backend_reasons() | kinds | phases
            | condition_types | {s.value for s in ConditionStatus} | {s.value for s in PowerState}
            | {"Normal", "Warning"} | documented_event_reasons() | set(OTHER_WORDS))


def test_every_api_reason_class_has_a_section() -> None:
    documented = {cls for _, classes in REASON_SECTIONS for cls in classes}
    assert api_reason_classes() == documented


def test_scanner_finds_a_new_reason_literal() -> None:
    source = 'st.ready(False, "BrandNewReason", f"Provider {name} ProviderGone")\n__all__ = ["Decide"]\nx = "GET"\n'
    assert [lit for lit, _ in camel_literals(source)] == ["BrandNewReason"]
    assert "BrandNewReason" not in known_words()


def test_reconcilers_use_only_known_reasons() -> None:
    known = known_words()
    unknown = sorted(f"{path.name}:{line} {lit!r}" for path in sorted(RECONCILERS.glob("*.py"))
                     for lit, line in camel_literals(path.read_text()) if lit not in known)
    assert not unknown, (
        "CamelCase literals in banlieue/reconcilers that are no known wire word: a new condition reason "
        "belongs in a reason class in banlieue/api (with a row in docs/operations.md), a new Event reason "
        f"in the Events table; anything else in OTHER_WORDS: {unknown}"
    )



def test_dev_md_names_the_keys_a_simulator_info_file_has() -> None:
    """docs/dev.md names the keys of ``vcsim-<provider>/info.json`` (what hack/vcsim writes with
    ``--info-file`` for ``banlieue dev``, read by govc users and ``banlieue dev vms``) as the
    file spells them: it once said ``user`` where the file has ``username``."""
    written = set(re.findall(r'json:"([a-z_]+)"', (ROOT / "hack" / "vcsim" / "main.go").read_text()))
    assert {"url", "username", "password", "ca_file", "pid"} <= written  # the struct is where it was
    documented: set[str] = set()
    for line in (ROOT / "docs" / "dev.md").read_text().splitlines():
        if "info.json" in line and "keys" in line:
            documented |= set(re.findall(r"`([a-z_]+)`", line.split("keys", 1)[1]))
    assert {"url", "username", "password", "ca_file"} <= documented, documented
    assert documented <= written, documented - written
