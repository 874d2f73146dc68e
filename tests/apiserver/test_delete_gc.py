"""Deletion: finalizers, deletionTimestamp, preconditions, propagation policies and garbage collection."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .conftest import WIDGETS, Http, widget

CMS = "/api/v1/namespaces/default/configmaps"


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await check():
            await asyncio.sleep(0.05)


async def gone(http: Http, path: str) -> bool:
    return (await http.get(path))[0] == 404


def owned(name: str, owner: dict[str, object], *, block: bool = False) -> dict[str, object]:
    md = owner["metadata"]
    assert isinstance(md, dict)
    ref = {"apiVersion": "example.com/v1", "kind": "Widget", "name": md["name"], "uid": md["uid"]}
    if block:
        ref["blockOwnerDeletion"] = True
        ref["controller"] = True
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [ref]}}


async def test_finalizers_hold_the_object(widgets: Http) -> None:
    _, w, _ = await widgets.post(WIDGETS, widget("f", 1, finalizers=["example.com/hold"]))
    status, body, _ = await widgets.delete(f"{WIDGETS}/f")
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["deletionGracePeriodSeconds"] == 0
    status, live, _ = await widgets.get(f"{WIDGETS}/f")
    assert status == 200 and live["metadata"]["finalizers"] == ["example.com/hold"]
    live["metadata"]["finalizers"].append("example.com/new")
    status, body, _ = await widgets.put(f"{WIDGETS}/f", live)
    assert status == 422 and "no new finalizers can be added if the object is being deleted" in body["message"]
    assert body["details"]["causes"][0]["field"] == "metadata.finalizers"
    status, _, _ = await widgets.patch(f"{WIDGETS}/f", {"metadata": {"finalizers": None}},
                                       "application/merge-patch+json")
    assert status == 200
    assert await gone(widgets, f"{WIDGETS}/f")
    events = await widgets.watch_lines(WIDGETS, {"resourceVersion": w["metadata"]["resourceVersion"],
                                                 "timeoutSeconds": "1"})
    assert [e["type"] for e in events] == ["MODIFIED", "DELETED"]


async def test_delete_preconditions(http: Http) -> None:
    _, c, _ = await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pc"}})
    status, body, _ = await http.delete(f"{CMS}/pc", {"preconditions": {"uid": "nope"}})
    assert status == 409 and body["reason"] == "Conflict" and "Precondition failed: UID in precondition" in body["message"]
    status, body, _ = await http.delete(f"{CMS}/pc", {"preconditions": {"resourceVersion": "1"}})
    assert status == 409 and "ResourceVersion in precondition" in body["message"]
    status, body, _ = await http.delete(f"{CMS}/pc", {"preconditions": {"uid": c["metadata"]["uid"]}})
    assert status == 200 and body["status"] == "Success" and body["details"]["uid"] == c["metadata"]["uid"]
    status, body, _ = await http.delete(f"{CMS}/pc")
    assert status == 404


async def test_background_gc_deletes_dependents(widgets: Http) -> None:
    _, owner, _ = await widgets.post(WIDGETS, widget("owner", 1))
    await widgets.post(CMS, owned("dep", owner))
    status, _, _ = await widgets.delete(f"{WIDGETS}/owner")
    assert status == 200
    await eventually(lambda: gone(widgets, f"{CMS}/dep"))


async def test_orphan_keeps_dependents_without_reference(widgets: Http) -> None:
    _, owner, _ = await widgets.post(WIDGETS, widget("o", 1))
    await widgets.post(CMS, owned("orph", owner))
    status, body, _ = await widgets.delete(f"{WIDGETS}/o", {"propagationPolicy": "Orphan"})
    assert status == 200 and "orphan" in body["metadata"]["finalizers"]
    await eventually(lambda: gone(widgets, f"{WIDGETS}/o"))
    status, dep, _ = await widgets.get(f"{CMS}/orph")
    assert status == 200 and not dep["metadata"].get("ownerReferences")


async def test_foreground_waits_for_blocking_dependents(widgets: Http) -> None:
    _, owner, _ = await widgets.post(WIDGETS, widget("fg", 1))
    dep = owned("blocker", owner, block=True)
    dep["metadata"]["finalizers"] = ["example.com/slow"]  # type: ignore[index]
    await widgets.post(CMS, dep)
    status, body, _ = await widgets.delete(f"{WIDGETS}/fg", params={"propagationPolicy": "Foreground"})
    assert status == 200 and "foregroundDeletion" in body["metadata"]["finalizers"]

    async def dep_deleting() -> bool:
        return bool((await widgets.get(f"{CMS}/blocker"))[1]["metadata"].get("deletionTimestamp"))

    await eventually(dep_deleting)
    await asyncio.sleep(0.3)
    assert (await widgets.get(f"{WIDGETS}/fg"))[0] == 200
    await widgets.patch(f"{CMS}/blocker", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    await eventually(lambda: gone(widgets, f"{WIDGETS}/fg"))


async def test_gc_keeps_dependents_with_live_owner(widgets: Http) -> None:
    _, a, _ = await widgets.post(WIDGETS, widget("oa", 1))
    _, b, _ = await widgets.post(WIDGETS, widget("ob", 1))
    dep = owned("shared", a)
    dep["metadata"]["ownerReferences"].append(  # type: ignore[index]
        {"apiVersion": "example.com/v1", "kind": "Widget", "name": "ob", "uid": b["metadata"]["uid"]})
    await widgets.post(CMS, dep)
    await widgets.delete(f"{WIDGETS}/oa")

    async def one_ref() -> bool:
        refs = (await widgets.get(f"{CMS}/shared"))[1]["metadata"].get("ownerReferences") or []
        return [r["name"] for r in refs] == ["ob"]

    await eventually(one_ref)


async def test_invalid_propagation_policy_and_delete_collection(http: Http) -> None:
    for n in ("dc1", "dc2"):
        await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "labels": {"g": "x"}}})
    await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep"}})
    status, body, _ = await http.delete(f"{CMS}/dc1", {"propagationPolicy": "Sideways"})
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueNotSupported"
    status, body, _ = await http.delete(CMS, params={"labelSelector": "g=x"})
    assert status == 200 and sorted(i["metadata"]["name"] for i in body["items"]) == ["dc1", "dc2"]
    _, lst, _ = await http.get(CMS)
    assert [i["metadata"]["name"] for i in lst["items"]] == ["keep"]
