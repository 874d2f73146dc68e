"""Namespace deletion as kube-apiserver and the namespace controller do it.

kubernetes.io "Namespaces" / "Finalizers" / API reference NamespaceStatus: DELETE sets
``deletionTimestamp`` and ``status.phase: Terminating``; the namespace controller deletes every
object in it (objects with finalizers only get a ``deletionTimestamp`` and stay until their
finalizers are removed), reports progress in ``status.conditions``
(``NamespaceDeletionContentFailure``, ``NamespaceContentRemaining``,
``NamespaceFinalizersRemaining``, ...), and removes ``kubernetes`` from ``spec.finalizers`` once
the namespace is empty, which removes the namespace. The NamespaceLifecycle admission plugin
refuses creates in a terminating namespace (403, cause ``NamespaceTerminating``); updates and
deletes of existing objects stay allowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .conftest import Http, widget

NS = "/api/v1/namespaces"
WIDGETS_T4 = "/apis/example.com/v1/namespaces/t4/widgets"
SECRETS_T4 = "/api/v1/namespaces/t4/secrets"
CMS_T4 = "/api/v1/namespaces/t4/configmaps"


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 5.0) -> Any:
    async with asyncio.timeout(timeout):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.05)


def conditions(ns_obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (ns_obj.get("status") or {}).get("conditions") or []}


async def populated(http: Http) -> dict[str, Any]:
    """Namespace t4 with a Secret, a ConfigMap, a Widget held by a finalizer and a free Widget."""
    status, ns, _ = await http.post(NS, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t4"}})
    assert status == 201 and ns["spec"]["finalizers"] == ["kubernetes"] and ns["status"]["phase"] == "Active"
    assert (await http.post(SECRETS_T4, {"metadata": {"name": "creds"}, "stringData": {"password": "x"}}))[0] == 201
    assert (await http.post(CMS_T4, {"metadata": {"name": "cm"}}))[0] == 201
    assert (await http.post(WIDGETS_T4, widget("held", 1, finalizers=["example.com/hold"])))[0] == 201
    assert (await http.post(WIDGETS_T4, widget("free", 2)))[0] == 201
    return ns  # type: ignore[no-any-return]


async def test_namespace_terminates_and_waits_for_finalizers(widgets: Http) -> None:
    await populated(widgets)
    status, body, _ = await widgets.delete(f"{NS}/t4")
    # The first DELETE answers the Namespace itself, now terminating.
    assert status == 200 and body["kind"] == "Namespace"
    assert body["metadata"]["deletionTimestamp"] and body["status"]["phase"] == "Terminating"
    assert body["spec"]["finalizers"] == ["kubernetes"]

    async def content_settled() -> dict[str, Any] | None:
        _, ns, _ = await widgets.get(f"{NS}/t4")
        return ns if "NamespaceFinalizersRemaining" in conditions(ns) else None

    ns = await eventually(content_settled)
    # Objects without finalizers are gone at once; the held one only has a deletionTimestamp.
    assert (await widgets.get(f"{SECRETS_T4}/creds"))[0] == 404
    assert (await widgets.get(f"{CMS_T4}/cm"))[0] == 404
    assert (await widgets.get(f"{WIDGETS_T4}/free"))[0] == 404
    status, held, _ = await widgets.get(f"{WIDGETS_T4}/held")
    assert status == 200 and held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == ["example.com/hold"]

    conds = conditions(ns)
    assert ns["status"]["phase"] == "Terminating" and ns["spec"]["finalizers"] == ["kubernetes"]
    assert list(conds) == ["NamespaceDeletionDiscoveryFailure", "NamespaceDeletionGroupVersionParsingFailure",
                           "NamespaceDeletionContentFailure", "NamespaceContentRemaining", "NamespaceFinalizersRemaining"]
    assert (conds["NamespaceDeletionDiscoveryFailure"]["status"], conds["NamespaceDeletionDiscoveryFailure"]["reason"]) == (
        "False", "ResourcesDiscovered")
    assert (conds["NamespaceDeletionContentFailure"]["status"], conds["NamespaceDeletionContentFailure"]["reason"]) == (
        "False", "ContentDeleted")
    remaining = conds["NamespaceContentRemaining"]
    assert (remaining["status"], remaining["reason"]) == ("True", "SomeResourcesRemain")
    assert remaining["message"] == "Some resources are remaining: widgets.example.com has 1 resource instances"
    fins = conds["NamespaceFinalizersRemaining"]
    assert (fins["status"], fins["reason"]) == ("True", "SomeFinalizersRemain")
    assert fins["message"] == "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    assert all(c["lastTransitionTime"] for c in conds.values())

    # Still there a while later: nothing removes a namespace with content.
    await asyncio.sleep(0.5)
    assert (await widgets.get(f"{NS}/t4"))[0] == 200

    # The finalizer's owner finishes: the object goes, then the namespace.
    status, _, _ = await widgets.patch(f"{WIDGETS_T4}/held", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert status == 200

    async def ns_gone() -> bool:
        return (await widgets.get(f"{NS}/t4"))[0] == 404

    await eventually(ns_gone)
    assert (await widgets.get(f"{WIDGETS_T4}/held"))[0] == 404


async def test_namespace_events_end_with_finalizer_removed(widgets: Http) -> None:
    ns = await populated(widgets)
    rv = ns["metadata"]["resourceVersion"]
    await widgets.delete(f"{NS}/t4")
    await widgets.patch(f"{WIDGETS_T4}/held", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    events = await widgets.watch_lines(NS, {"resourceVersion": rv, "fieldSelector": "metadata.name=t4", "timeoutSeconds": "2"},
                                       stop_after=3.0)
    types = [e["type"] for e in events]
    assert types[0] == "MODIFIED" and types[-1] == "DELETED" and types.count("DELETED") == 1
    first, last = events[0]["object"], events[-1]["object"]
    assert first["status"]["phase"] == "Terminating" and first["metadata"]["deletionTimestamp"]
    # The namespace goes when the namespace controller removes ``kubernetes`` (``/finalize``).
    assert last["spec"].get("finalizers") in (None, [])
    ok = conditions(last)
    assert ok["NamespaceContentRemaining"]["status"] == "False" and ok["NamespaceContentRemaining"]["reason"] == "ContentRemoved"
    assert ok["NamespaceFinalizersRemaining"]["reason"] == "ContentHasNoFinalizers"


async def test_terminating_namespace_refuses_creates_but_not_updates(widgets: Http) -> None:
    await populated(widgets)
    await widgets.delete(f"{NS}/t4")
    for path, body in ((SECRETS_T4, {"metadata": {"name": "again"}}), (WIDGETS_T4, widget("late"))):
        status, err, _ = await widgets.post(path, body)
        assert status == 403 and err["reason"] == "Forbidden"
        assert "unable to create new content in namespace t4 because it is being terminated" in err["message"]
        assert err["details"]["causes"] == [
            {"reason": "NamespaceTerminating", "message": "namespace t4 is being terminated", "field": "metadata.namespace"}]
    # A controller can still write status and metadata of what is left, e.g. to drop its finalizer.
    status, _, _ = await widgets.patch(f"{WIDGETS_T4}/held/status", {"status": {"phase": "Cleaning"}}, "application/merge-patch+json")
    assert status == 200
    status, _, _ = await widgets.patch(f"{WIDGETS_T4}/held", {"metadata": {"labels": {"a": "b"}}}, "application/merge-patch+json")
    assert status == 200
    # Editing the namespace itself while it terminates does not remove it early.
    status, ns, _ = await widgets.patch(f"{NS}/t4", {"metadata": {"labels": {"team": "x"}}}, "application/merge-patch+json")
    assert status == 200 and ns["status"]["phase"] == "Terminating"
    await asyncio.sleep(0.3)
    status, ns, _ = await widgets.get(f"{NS}/t4")
    assert status == 200 and ns["spec"]["finalizers"] == ["kubernetes"]
    # Deleting it again changes nothing while content is left.
    status, again, _ = await widgets.delete(f"{NS}/t4")
    assert status == 200 and again["status"]["phase"] == "Terminating"
    assert (await widgets.get(f"{NS}/t4"))[0] == 200


async def test_empty_namespace_goes_at_once(http: Http) -> None:
    assert (await http.post(NS, {"metadata": {"name": "empty"}}))[0] == 201
    status, body, _ = await http.delete(f"{NS}/empty")
    assert status == 200 and body["status"]["phase"] == "Terminating"

    async def gone() -> bool:
        return (await http.get(f"{NS}/empty"))[0] == 404

    await eventually(gone, timeout=2.0)


async def test_namespace_metadata_finalizer_holds_it_after_content_is_gone(http: Http) -> None:
    assert (await http.post(NS, {"metadata": {"name": "kept", "finalizers": ["example.com/ns-hold"]}}))[0] == 201
    assert (await http.post("/api/v1/namespaces/kept/configmaps", {"metadata": {"name": "c"}}))[0] == 201
    await http.delete(f"{NS}/kept")

    async def finalized() -> dict[str, Any] | None:
        _, ns, _ = await http.get(f"{NS}/kept")
        return ns if not ns["spec"].get("finalizers") else None

    ns = await eventually(finalized)
    # Empty and finalized by the namespace controller, but a metadata finalizer still holds it.
    assert ns["metadata"]["finalizers"] == ["example.com/ns-hold"] and ns["status"]["phase"] == "Terminating"
    assert (await http.get("/api/v1/namespaces/kept/configmaps/c"))[0] == 404
    status, _, _ = await http.patch(f"{NS}/kept", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert status == 200
    assert (await http.get(f"{NS}/kept"))[0] == 404
