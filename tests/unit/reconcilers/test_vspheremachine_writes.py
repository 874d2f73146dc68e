"""VSphereMachine own writes: the cache-behind check."""

from __future__ import annotations

from typing import Any

from banlieue.reconcilers.vspheremachine_writes import OwnWrites


def obj(rv: str, uid: str = "u1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "m1", "namespace": "ns", "uid": uid, "resourceVersion": rv, "generation": 2,
                         "finalizers": ["f"], **meta}, "status": {"rv": rv}}


def test_cache_behind_until_it_shows_our_write_or_what_a_get_returned() -> None:
    w = OwnWrites()
    assert not w.cache_behind(obj("5")), "nothing written: the cache is trusted"
    w.wrote(obj("7"), status=True)
    assert w.cache_behind(obj("5")), "the cache predates our write"
    w.observed(obj("9"))  # a GET: the server is at 9 (someone wrote after us)
    assert w.cache_behind(obj("7")), "the cache must reach what the GET returned"
    assert not w.cache_behind(obj("9"))
    assert not w.cache_behind(obj("5")), "caught up once: trusted again until the next write"
