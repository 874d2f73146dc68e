"""Indexer semantics (client-go tools/cache thread_safe_store/index)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from banlieue.runtime.cache import (
    NAMESPACE_INDEX,
    OWNER_UID_INDEX,
    Cache,
    DecodedObjects,
    Indexer,
    meta_namespace_key,
    strip_managed_fields,
)


def obj(name: str, ns: str | None = "default", rv: str = "1", owners: tuple[str, ...] = (), **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": rv, "labels": labels,
                            "ownerReferences": [{"uid": u, "kind": "X", "name": "o", "apiVersion": "v1"} for u in owners]}
    if ns:
        meta["namespace"] = ns
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


@pytest.mark.parametrize(("o", "key"), [(obj("a"), "default/a"), (obj("a", ns=None), "a")], ids=["namespaced", "cluster-scoped"])
def test_key_function(o: dict[str, Any], key: str) -> None:
    assert meta_namespace_key(o) == key


def test_namespace_and_owner_indices_follow_updates_and_deletes() -> None:
    idx = Indexer()
    idx.add(obj("a", owners=("u1",)))
    idx.add(obj("b", ns="other", owners=("u1", "u2")))
    assert idx.index_keys(NAMESPACE_INDEX, "default") == ["default/a"]
    assert idx.index_keys(OWNER_UID_INDEX, "u1") == ["default/a", "other/b"]
    idx.update(obj("b", ns="other", rv="2", owners=("u2",)))
    assert idx.index_keys(OWNER_UID_INDEX, "u1") == ["default/a"]
    assert [o["metadata"]["name"] for o in idx.by_index(OWNER_UID_INDEX, "u2")] == ["b"]
    deleted = idx.delete("default/a")
    assert deleted is not None and deleted["metadata"]["name"] == "a"
    assert idx.index_keys(OWNER_UID_INDEX, "u1") == []
    assert "u1" not in idx.list_index_func_values(OWNER_UID_INDEX)
    assert idx.delete("default/a") is None
    assert len(idx) == 1


def test_add_indexer_after_items_exist() -> None:
    idx = Indexer()
    idx.add(obj("a", app="web"))
    idx.add(obj("b", app="db"))
    idx.add_indexer("app", lambda o: [o["metadata"]["labels"]["app"]])
    assert idx.index_keys("app", "web") == ["default/a"]
    idx.add(obj("c", app="web"))
    assert idx.index_keys("app", "web") == ["default/a", "default/c"]
    with pytest.raises(ValueError):
        idx.add_indexer("app", lambda o: [])


def test_reads_are_fresh_copies_the_cache_cannot_be_mutated_through() -> None:
    idx = Indexer()
    idx.add(obj("a"))
    got = idx.get("default/a")
    assert got is not None
    got["data"]["k"] = "changed"  # type: ignore[index]
    again = idx.get_by("default", "a")
    assert again is not None and again["data"]["k"] == "v"


def test_put_reports_unchanged_objects_and_resource_version() -> None:
    idx = Indexer()
    assert idx.put(obj("a")) is None
    same = idx.put(obj("a"))
    assert same == idx.get_raw("default/a")
    idx.put(obj("a", rv="7"))
    assert idx.resource_version("default/a") == "7"


def test_managed_fields_are_stripped_without_touching_the_input() -> None:
    o = obj("a")
    o["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    stripped = strip_managed_fields(o)
    assert "managedFields" not in stripped["metadata"]
    assert "managedFields" in o["metadata"]


def test_list_and_by_index_are_snapshots_decoded_one_object_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    idx = Indexer()
    for name in ("a", "b", "c"):
        idx.add(obj(name, team="x" if name != "b" else "y"))
    listed = idx.list()
    selected = idx.by_index(NAMESPACE_INDEX, "default")
    assert isinstance(listed, DecodedObjects) and len(listed) == 3 and len(selected) == 3
    idx.update(obj("a", rv="2"))  # later changes do not reach a snapshot taken before them
    idx.delete("default/c")
    assert [o["metadata"]["resourceVersion"] for o in listed] == ["1", "1", "1"]
    assert [o["metadata"]["name"] for o in selected] == ["a", "b", "c"]
    assert selected[1]["metadata"]["name"] == "b" and [o["metadata"]["name"] for o in selected[1:]] == ["b", "c"]
    first = listed[0]
    first["data"]["k"] = "changed"  # each access decodes a fresh dict: the snapshot is unchanged
    assert listed[0]["data"] == {"k": "v"} and listed[0] is not listed[0]
    decoded: list[bytes] = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda data: (decoded.append(data), loads(data))[1])
    it = iter(listed)
    assert next(it) == obj("a", team="x") and len(decoded) == 1  # decoded as the iteration reaches it
    assert [o["metadata"]["name"] for o in it] == ["b", "c"] and len(decoded) == 3


class _Synced:
    def __init__(self, store: Indexer) -> None:
        self.store = store

    def has_synced(self) -> bool:
        return True


def test_cache_list_and_iter_objects_agree() -> None:
    from banlieue.runtime.kinds import CONFIG_MAP

    idx = Indexer()
    for name, ns, team in (("a", "default", "x"), ("b", "default", "y"), ("c", "other", "x")):
        idx.add(obj(name, ns=ns, team=team))
    informer = _Synced(idx)
    cache = Cache(lambda _kind: informer, lambda: [informer])
    assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP)] == ["a", "b", "c"]
    assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP, "default")] == ["a", "b"]
    assert [o["metadata"]["name"] for o in cache.list(CONFIG_MAP, None, {"team": "x"})] == ["a", "c"]
    assert isinstance(cache.list(CONFIG_MAP, "default"), list)
    for args in ((CONFIG_MAP,), (CONFIG_MAP, "default"), (CONFIG_MAP, None, {"team": "x"}), (CONFIG_MAP, "default", {"team": "y"})):
        lazy = cache.iter_objects(*args)  # type: ignore[arg-type]
        assert not isinstance(lazy, list)
        assert list(lazy) == cache.list(*args)  # type: ignore[arg-type]
