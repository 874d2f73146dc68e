"""ReadYourWrites: the controller's own last write overlays a cache that has not seen it yet."""

from __future__ import annotations

from typing import Any

from banlieue.reconcilers.read_your_writes import ReadYourWrites


def obj(rv: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vm-1", "resourceVersion": rv}, **extra}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_stale_cache_reads_the_written_object_until_the_cache_catches_up() -> None:
    rw = ReadYourWrites(ttl=10.0, clock=Clock())
    rw.record("ns/vm-1", obj("1"), obj("2", status={"a": 1}))
    rw.record("ns/vm-1", obj("2", status={"a": 1}), obj("3", status={"a": 2}))
    assert rw.view("ns/vm-1", obj("1")) == obj("3", status={"a": 2})  # both superseded versions are stale
    assert rw.view("ns/vm-1", obj("2")) == obj("3", status={"a": 2})
    assert rw.view("ns/vm-1", obj("3", status={"a": 2})) == obj("3", status={"a": 2})
    assert rw.view("ns/vm-1", obj("1")) == obj("1")  # entry dropped once the cache caught up


def test_create_overlays_absence_and_a_newer_version_wins() -> None:
    rw = ReadYourWrites(ttl=10.0, clock=Clock())
    rw.record("ns/vsm", None, obj("5"))
    assert rw.view("ns/vsm", None) == obj("5")
    assert rw.view("ns/vsm", obj("7")) == obj("7")  # someone else wrote after us
    assert rw.view("ns/vsm", None) is None


def test_entries_expire_after_ttl_and_forget_drops_them() -> None:
    clock = Clock()
    rw = ReadYourWrites(ttl=10.0, clock=clock)
    rw.record("a", obj("1"), obj("2"))
    rw.record("b", obj("1"), obj("2"))
    rw.forget("b")
    assert rw.view("b", obj("1")) == obj("1")
    clock.now = 10.0
    assert rw.view("a", obj("1")) == obj("1")
    rw.record("c", obj("1"), obj("2"))
    clock.now = 25.0
    rw.record("d", obj("1"), obj("2"))  # purges "c", which has expired
    assert "c" not in rw._entries
