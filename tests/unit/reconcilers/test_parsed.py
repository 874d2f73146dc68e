"""ParsedCache: parsed models reused while resourceVersion stays, re-parsed when it changes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from banlieue.api.vmclass import VMClass
from banlieue.reconcilers.parsed import ParsedCache


def vmclass(rv: str, memory: Any = 2048) -> dict[str, Any]:
    return {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass",
        "metadata": {"name": "small", "resourceVersion": rv},
        "spec": {"hardware": {"cpus": 2, "memoryMiB": memory}},
    }


def test_same_resource_version_is_parsed_once_and_a_new_one_again() -> None:
    cache = ParsedCache()
    first = cache.parse(VMClass, vmclass("1"))
    assert first is not None and first.spec.hardware.memory_mib == 2048
    assert cache.parse(VMClass, vmclass("1")) is first
    changed = cache.parse(VMClass, vmclass("2", memory=4096))
    assert changed is not first and changed is not None and changed.spec.hardware.memory_mib == 4096


def test_without_resource_version_every_call_parses() -> None:
    cache = ParsedCache()
    raw = vmclass("")
    a, b = cache.parse(VMClass, raw), cache.parse(VMClass, raw)
    assert a is not None and b is not None and a is not b


def test_invalid_objects_are_none_and_reported_once_per_resource_version() -> None:
    seen: list[tuple[str, int]] = []

    def on_invalid(raw: Any, err: ValidationError) -> None:
        seen.append((raw["metadata"]["resourceVersion"], err.error_count()))

    cache = ParsedCache(on_invalid)
    assert cache.parse(VMClass, vmclass("5", memory="lots")) is None
    assert cache.parse(VMClass, vmclass("5", memory="lots")) is None
    assert [rv for rv, _ in seen] == ["5"]
    assert cache.parse(VMClass, None) is None
    fixed = cache.parse(VMClass, vmclass("6"))
    assert fixed is not None and [rv for rv, _ in seen] == ["5"]
