"""PATCH: merge, JSON patch, strategic merge (builtin only), server-side apply; main and /status."""

from __future__ import annotations

import json

from kubernetes_asyncio import client as k8s

from .conftest import WIDGETS, Http, widget

MERGE = "application/merge-patch+json"
JSONP = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
CMS = "/api/v1/namespaces/default/configmaps"


async def test_merge_and_json_patch(widgets: Http) -> None:
    await widgets.post(WIDGETS, widget("p", 1))
    status, w, _ = await widgets.patch(f"{WIDGETS}/p", {"spec": {"size": 4}, "metadata": {"labels": {"a": "b"}}}, MERGE)
    assert status == 200 and w["spec"]["size"] == 4 and w["metadata"]["labels"] == {"a": "b"}
    assert w["metadata"]["generation"] == 2
    status, w, _ = await widgets.patch(f"{WIDGETS}/p", [{"op": "replace", "path": "/spec/size", "value": 7},
                                                        {"op": "add", "path": "/spec/tags", "value": ["x"]}], JSONP)
    assert status == 200 and w["spec"]["size"] == 7 and w["spec"]["tags"] == ["x"]
    status, body, _ = await widgets.patch(f"{WIDGETS}/p", [{"op": "test", "path": "/spec/size", "value": 1}], JSONP)
    assert status == 422 and body["reason"] == "Invalid"
    status, body, _ = await widgets.patch(f"{WIDGETS}/p", "[{bad", JSONP)
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await widgets.patch(f"{WIDGETS}/p", {"spec": {"size": 0}}, MERGE)
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.size"
    status, body, _ = await widgets.patch(f"{WIDGETS}/absent", {"spec": {"size": 2}}, MERGE)
    assert status == 404
    stale = {"metadata": {"resourceVersion": "1"}, "spec": {"size": 2}}
    status, body, _ = await widgets.patch(f"{WIDGETS}/p", stale, MERGE)
    assert status == 409 and body["reason"] == "Conflict"


async def test_status_patch_only_touches_status(widgets: Http) -> None:
    await widgets.post(WIDGETS, widget("s", 1))
    status, w, _ = await widgets.patch(f"{WIDGETS}/s/status", {"status": {"phase": "Up"}, "spec": {"size": 9}}, MERGE)
    assert status == 200 and w["status"] == {"phase": "Up"} and w["spec"]["size"] == 1
    assert w["metadata"]["generation"] == 1
    status, w, _ = await widgets.patch(f"{WIDGETS}/s", {"status": {"phase": "Down"}}, MERGE)
    assert w["status"] == {"phase": "Up"}
    status, w, _ = await widgets.patch(f"{WIDGETS}/s/status", [{"op": "replace", "path": "/status/phase",
                                                                "value": "Down"}], JSONP)
    assert w["status"]["phase"] == "Down"


async def test_strategic_merge_patch(widgets: Http) -> None:
    status, body, _ = await widgets.patch(f"{WIDGETS}/x", {"spec": {"size": 2}}, SMP)
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    await widgets.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}})
    status, c, _ = await widgets.patch(f"{CMS}/c", {"data": {"b": "2"}, "metadata": {"labels": {"l": "v"}}}, SMP)
    assert status == 200 and c["data"] == {"a": "1", "b": "2"} and c["metadata"]["labels"] == {"l": "v"}
    status, body, _ = await widgets.patch(f"{CMS}/c", {"data": {}}, "application/xml")
    assert status == 415


async def test_server_side_apply(widgets: Http) -> None:
    doc = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nspec:\n  size: 2\n"
    status, body, _ = await widgets.patch(f"{WIDGETS}/a", doc, APPLY)
    assert status == 422 and body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch')
    status, body, _ = await widgets.patch(f"{WIDGETS}/a", {"spec": {"size": 1}}, MERGE, params={"force": "true"})
    assert status == 422 and body["details"]["causes"][0]["field"] == "force"
    status, w, _ = await widgets.patch(f"{WIDGETS}/a", doc, APPLY, params={"fieldManager": "alice"})
    assert status == 201 and w["spec"]["size"] == 2
    assert any(e["manager"] == "alice" and e["operation"] == "Apply" for e in w["metadata"]["managedFields"])
    status, w2, _ = await widgets.patch(f"{WIDGETS}/a", doc, APPLY, params={"fieldManager": "alice"})
    assert status == 200 and w2["metadata"]["resourceVersion"] == w["metadata"]["resourceVersion"]
    other = doc.replace("size: 2", "size: 3")
    status, body, _ = await widgets.patch(f"{WIDGETS}/a", other, APPLY, params={"fieldManager": "bob"})
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == 'Apply failed with 1 conflict: conflict with "alice": .spec.size'
    assert body["details"] == {"causes": [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".spec.size"}]}
    status, w3, _ = await widgets.patch(f"{WIDGETS}/a", other, APPLY, params={"fieldManager": "bob", "force": "true"})
    assert status == 200 and w3["spec"]["size"] == 3
    status_doc = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nstatus:\n  phase: Ready\n"
    status, w4, _ = await widgets.patch(f"{WIDGETS}/a/status", status_doc, APPLY, params={"fieldManager": "ctrl"})
    assert status == 200 and w4["status"] == {"phase": "Ready"}
    assert any(e.get("subresource") == "status" and e["manager"] == "ctrl" for e in w4["metadata"]["managedFields"])


async def test_patch_with_kubernetes_asyncio(widgets: Http, kapi: k8s.ApiClient) -> None:
    api = k8s.CustomObjectsApi(kapi)
    await api.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("k", 1))
    out = await api.patch_namespaced_custom_object("example.com", "v1", "default", "widgets", "k",
                                                   {"spec": {"size": 6}}, _content_type=MERGE)
    assert out["spec"]["size"] == 6
    out = await api.patch_namespaced_custom_object_status("example.com", "v1", "default", "widgets", "k",
                                                          {"status": {"phase": "Done"}}, _content_type=MERGE)
    assert out["status"]["phase"] == "Done"
    core = k8s.CoreV1Api(kapi)
    await core.create_namespaced_config_map("default", {"metadata": {"name": "kc"}, "data": {"a": "1"}})
    cmo = await core.patch_namespaced_config_map("kc", "default", {"data": {"a": "2"}},
                                                 _content_type="application/strategic-merge-patch+json")
    assert cmo.data == {"a": "2"}
    assert json.loads(json.dumps(cmo.to_dict(), default=str))["metadata"]["name"] == "kc"


async def test_scale_subresource(http: Http) -> None:
    import copy as _copy

    from .conftest import WIDGET_CRD

    crd = _copy.deepcopy(WIDGET_CRD)
    crd["spec"]["versions"][0]["subresources"]["scale"] = {
        "specReplicasPath": ".spec.size", "statusReplicasPath": ".status.replicas"}
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["replicas"] = {
        "type": "integer"}
    assert (await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[0] == 201
    _, disc, _ = await http.get("/apis/example.com/v1")
    assert any(r["name"] == "widgets/scale" and r["kind"] == "Scale" for r in disc["resources"])
    await http.post(WIDGETS, widget("sc", 2))
    status, sc, _ = await http.get(f"{WIDGETS}/sc/scale")
    assert status == 200 and sc["kind"] == "Scale" and sc["spec"]["replicas"] == 2
    assert sc["status"] == {"replicas": 0}
    status, sc, _ = await http.patch(f"{WIDGETS}/sc/scale", {"spec": {"replicas": 5}}, MERGE)
    assert status == 200 and sc["spec"]["replicas"] == 5
    _, w, _ = await http.get(f"{WIDGETS}/sc")
    assert w["spec"]["size"] == 5 and w["metadata"]["generation"] == 2
    sc["spec"]["replicas"] = 3
    status, sc2, _ = await http.put(f"{WIDGETS}/sc/scale", sc)
    assert status == 200 and sc2["spec"]["replicas"] == 3
    status, body, _ = await http.put(f"{WIDGETS}/sc/scale", sc)
    assert status == 409 and body["reason"] == "Conflict"


async def test_strategic_merge_lists_and_directives(http: Http) -> None:
    await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "smp", "finalizers": ["a.io/x"], "labels": {"k": "v"}},
                          "data": {"a": "1", "b": "2"}})
    status, c, _ = await http.patch(f"{CMS}/smp", {"metadata": {"finalizers": ["b.io/y"]}, "data": {"a": None}}, SMP)
    assert status == 200 and c["metadata"]["finalizers"] == ["a.io/x", "b.io/y"] and c["data"] == {"b": "2"}
    status, c, _ = await http.patch(f"{CMS}/smp", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"],
                                                                "$setElementOrder/finalizers": ["b.io/y"]}}, SMP)
    assert c["metadata"]["finalizers"] == ["b.io/y"]
    status, c, _ = await http.patch(f"{CMS}/smp", {"data": {"$patch": "replace", "z": "9"}}, SMP)
    assert c["data"] == {"z": "9"}
