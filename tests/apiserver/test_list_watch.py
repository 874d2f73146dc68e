"""LIST (selectors, pagination, tables) and WATCH (resume, 410, bookmarks, selectors)."""

from __future__ import annotations

import asyncio
import json

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch as kwatch

from banlieue.testing.apiserver.fixture import ApiServerHandle

from .conftest import WIDGETS, Http, widget

CMS = "/api/v1/namespaces/default/configmaps"


def cm(name: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}}}


async def test_label_and_field_selectors(http: Http) -> None:
    await http.post(CMS, cm("a", {"env": "prod", "tier": "web"}))
    await http.post(CMS, cm("b", {"env": "dev"}))
    await http.post(CMS, cm("c", {}))
    await http.post("/api/v1/namespaces/kube-system/configmaps", cm("d", {"env": "prod"}))

    async def names(path: str, **params: str) -> list[str]:
        status, body, _ = await http.get(path, params=params)
        assert status == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert await names(CMS, labelSelector="env=prod") == ["a"]
    assert await names(CMS, labelSelector="env in (prod,dev)") == ["a", "b"]
    assert await names(CMS, labelSelector="env!=prod") == ["b", "c"]
    assert await names(CMS, labelSelector="!env") == ["c"]
    assert await names(CMS, labelSelector="env,tier notin (db)") == ["a", "b"]
    assert await names(CMS, labelSelector="env,tier") == ["a"]
    assert await names("/api/v1/configmaps", labelSelector="env=prod") == ["a", "d"]
    assert await names("/api/v1/configmaps", fieldSelector="metadata.namespace=kube-system") == ["d"]
    assert await names(CMS, fieldSelector="metadata.name!=a") == ["b", "c"]
    status, body, _ = await http.get(CMS, params={"labelSelector": "env in (prod"})
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await http.get(CMS, params={"fieldSelector": "spec.foo=bar"})
    assert status == 400 and "field label not supported" in body["message"]


async def test_pagination_and_expired_continue(http: Http, apiserver: ApiServerHandle) -> None:
    for i in range(7):
        await http.post(CMS, cm(f"p{i}"))
    seen: list[str] = []
    token = None
    rvs = set()
    while True:
        params = {"limit": "3"}
        if token:
            params["continue"] = token
        status, body, _ = await http.get(CMS, params=params)
        assert status == 200
        seen += [i["metadata"]["name"] for i in body["items"]]
        rvs.add(body["metadata"]["resourceVersion"])
        token = body["metadata"].get("continue")
        if not token:
            break
        assert body["metadata"]["remainingItemCount"] == 7 - len(seen)
    assert seen == [f"p{i}" for i in range(7)] and len(rvs) == 1
    _, body, _ = await http.get(CMS, params={"limit": "2"})
    apiserver.server.compact()
    status, body, _ = await http.get(CMS, params={"limit": "2", "continue": body["metadata"]["continue"]})
    assert status == 410 and body["reason"] == "Expired"
    assert body["message"].startswith("The provided continue parameter is too old")
    status, body, _ = await http.get(CMS, params={"continue": "garbage!"})
    assert status == 400


async def test_table_output(widgets: Http) -> None:
    await widgets.post(WIDGETS, widget("t1", 3))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    status, table, _ = await widgets.get(WIDGETS, headers={"Accept": accept})
    assert status == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]][:2] == ["Name", "Size"]
    assert table["rows"][0]["cells"][:2] == ["t1", 3]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    status, table, _ = await widgets.get(WIDGETS, headers={"Accept": accept}, params={"includeObject": "Object"})
    assert table["rows"][0]["object"]["spec"]["size"] == 3
    status, table, _ = await widgets.get(CMS, headers={"Accept": accept})
    assert next(c["name"] for c in table["columnDefinitions"]) == "Name"


async def test_watch_initial_resume_and_bookmarks(http: Http) -> None:
    _, a, _ = await http.post(CMS, cm("w1"))
    rv_after_a = a["metadata"]["resourceVersion"]
    await http.post(CMS, cm("w2"))
    await http.delete(f"{CMS}/w1")
    events = await http.watch_lines(CMS, {"resourceVersion": "0", "timeoutSeconds": "1"})
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w2")]
    events = await http.watch_lines(CMS, {"resourceVersion": rv_after_a, "timeoutSeconds": "1"})
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "w2"), ("DELETED", "w1")]
    deleted = events[1]["object"]["metadata"]["resourceVersion"]
    assert int(deleted) > int(events[0]["object"]["metadata"]["resourceVersion"])
    # Bookmarks come only when the store is newer than the resourceVersion the watch started
    # from (kube-apiserver's watch cache): none from the latest one on a quiet server ...
    quiet = await http.watch_lines(CMS, {"resourceVersion": deleted, "allowWatchBookmarks": "true", "timeoutSeconds": "2"})
    assert quiet == []
    # ... one (every bookmark interval, 1 s here) from an older one, whose changes this selector hides.
    events = await http.watch_lines(CMS, {"resourceVersion": rv_after_a, "allowWatchBookmarks": "true",
                                          "labelSelector": "none=match", "timeoutSeconds": "3"}, max_events=1)
    assert events[0]["type"] == "BOOKMARK"
    assert events[0]["object"]["metadata"]["resourceVersion"] == deleted
    assert events[0]["object"]["metadata"] == {"resourceVersion": events[0]["object"]["metadata"]["resourceVersion"]}
    assert events[0]["object"]["kind"] == "ConfigMap"


async def test_watch_too_old_is_410_error_event(http: Http, apiserver: ApiServerHandle) -> None:
    await http.post(CMS, cm("x"))
    apiserver.server.compact()
    events = await http.watch_lines(CMS, {"resourceVersion": "2", "timeoutSeconds": "2"})
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    st = events[0]["object"]
    assert st["kind"] == "Status" and st["code"] == 410 and st["reason"] == "Expired"
    assert st["message"].startswith("too old resource version: 2 (")


async def test_watch_live_events_and_selector_transitions(http: Http) -> None:
    _, obj, _ = await http.post(CMS, cm("sel", {"app": "a"}))
    rv = obj["metadata"]["resourceVersion"]

    async def mutate() -> None:
        await asyncio.sleep(0.2)
        o = (await http.get(f"{CMS}/sel"))[1]
        o["metadata"]["labels"] = {"app": "b"}
        await http.put(f"{CMS}/sel", o)
        o["metadata"]["labels"] = {"app": "a"}
        o["metadata"].pop("resourceVersion")
        await http.put(f"{CMS}/sel", o)
        await http.delete(f"{CMS}/sel")

    task = asyncio.create_task(mutate())
    events = await http.watch_lines(CMS, {"resourceVersion": rv, "labelSelector": "app=a", "timeoutSeconds": "2"},
                                    max_events=3)
    await task
    assert [e["type"] for e in events] == ["DELETED", "ADDED", "DELETED"]


async def test_send_initial_events_bookmark(http: Http) -> None:
    await http.post(CMS, cm("i1"))
    events = await http.watch_lines(CMS, {"sendInitialEvents": "true", "allowWatchBookmarks": "true",
                                          "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "1"},
                                    max_events=2)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_with_kubernetes_asyncio(widgets: Http, kapi: k8s.ApiClient) -> None:
    api = k8s.CustomObjectsApi(kapi)
    await api.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("kw", 1))
    seen = []
    w = kwatch.Watch()
    async with asyncio.timeout(10):
        async for ev in w.stream(api.list_namespaced_custom_object, "example.com", "v1", "default", "widgets",
                                 timeout_seconds=1):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
    assert seen == [("ADDED", "kw")]


async def test_watch_by_name_and_legacy_watch_path(http: Http) -> None:
    await http.post(CMS, cm("one"))
    await http.post(CMS, cm("two"))
    events = await http.watch_lines("/api/v1/watch/namespaces/default/configmaps/two", {"timeoutSeconds": "1"})
    assert [e["object"]["metadata"]["name"] for e in events] == ["two"]
    events = await http.watch_lines(CMS, {"fieldSelector": "metadata.name=one", "timeoutSeconds": "1"})
    assert [json.dumps(e["object"]["metadata"]["name"]) for e in events] == ['"one"']


async def test_pages_are_a_consistent_snapshot_and_exact_lists(http: Http) -> None:
    for n in ("s1", "s2", "s3", "s4"):
        await http.post(CMS, cm(n))
    _, page, _ = await http.get(CMS, params={"limit": "2"})
    list_rv = page["metadata"]["resourceVersion"]
    await http.delete(f"{CMS}/s3")
    await http.post(CMS, cm("s5"))
    _, rest, _ = await http.get(CMS, params={"limit": "10", "continue": page["metadata"]["continue"]})
    assert [i["metadata"]["name"] for i in rest["items"]] == ["s3", "s4"]
    assert rest["metadata"]["resourceVersion"] == list_rv
    _, exact, _ = await http.get(CMS, params={"resourceVersion": list_rv, "resourceVersionMatch": "Exact"})
    assert [i["metadata"]["name"] for i in exact["items"]] == ["s1", "s2", "s3", "s4"]
    _, now, _ = await http.get(CMS)
    assert [i["metadata"]["name"] for i in now["items"]] == ["s1", "s2", "s4", "s5"]


async def test_list_options_validation(http: Http) -> None:
    status, body, _ = await http.get(CMS, params={"resourceVersionMatch": "Exact"})
    assert status == 422 and body["details"]["kind"] == "ListOptions"
    status, body, _ = await http.get(CMS, params={"resourceVersionMatch": "Sometimes", "resourceVersion": "1"})
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueNotSupported"
    status, body, _ = await http.get(CMS, params={"watch": "1", "sendInitialEvents": "true"})
    assert status == 422
    status, body, _ = await http.get(CMS, params={"watch": "1", "resourceVersion": "abc"})
    assert status == 422 and body["details"]["causes"][0]["field"] == "resourceVersion"


async def test_partial_object_metadata(http: Http) -> None:
    await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pm"}, "data": {"a": "1"}})
    accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    _, one, _ = await http.get(f"{CMS}/pm", headers={"Accept": accept})
    assert one["kind"] == "PartialObjectMetadata" and one["metadata"]["name"] == "pm" and "data" not in one
    _, lst, _ = await http.get(CMS, headers={"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
    assert lst["kind"] == "PartialObjectMetadataList" and lst["items"][0]["metadata"]["name"] == "pm"


async def test_too_large_resource_version(http: Http, apiserver: ApiServerHandle) -> None:
    future = str(apiserver.server.store.rv + 1000)
    status, body, _ = await http.get(CMS, params={"resourceVersion": future})
    assert status == 504 and body["reason"] == "Timeout"
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    events = await http.watch_lines(CMS, {"resourceVersion": future, "timeoutSeconds": "2"})
    assert len(events) == 1 and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 504


async def test_crd_selectable_fields(http: Http) -> None:
    import copy

    from .conftest import WIDGET_CRD

    crd = copy.deepcopy(WIDGET_CRD)
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".spec.color"}]
    assert (await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[0] == 201
    red, blue = widget("r", 1), widget("b", 1)
    blue["spec"]["color"] = "blue"
    await http.post(WIDGETS, red)
    await http.post(WIDGETS, blue)
    _, body, _ = await http.get(WIDGETS, params={"fieldSelector": "spec.color=blue"})
    assert [i["metadata"]["name"] for i in body["items"]] == ["b"]
    status, _, _ = await http.get(WIDGETS, params={"fieldSelector": "spec.size=1"})
    assert status == 400
