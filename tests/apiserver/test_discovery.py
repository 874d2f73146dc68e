"""Discovery, health and CRD registration over real HTTP."""

from __future__ import annotations

import copy

from kubernetes_asyncio import client as k8s

from .conftest import WIDGET_CRD, Http

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


async def test_health_and_version(http: Http) -> None:
    for path in ("/healthz", "/readyz", "/livez"):
        status, body, _ = await http.get(path)
        assert (status, body) == (200, "ok")
    status, body, _ = await http.get("/version")
    assert status == 200 and body["major"] == "1" and body["gitVersion"].startswith("v1.")


async def test_legacy_and_group_discovery(http: Http) -> None:
    status, body, _ = await http.get("/api")
    assert status == 200 and body["kind"] == "APIVersions" and body["versions"] == ["v1"]
    status, body, _ = await http.get("/api/v1")
    names = {r["name"]: r for r in body["resources"]}
    assert names["configmaps"]["shortNames"] == ["cm"] and names["configmaps"]["namespaced"] is True
    assert names["namespaces"]["namespaced"] is False and "namespaces/status" in names
    assert set(names["secrets"]["verbs"]) >= {"create", "get", "list", "watch", "patch", "update", "delete"}
    status, body, _ = await http.get("/apis")
    groups = {g["name"] for g in body["groups"]}
    assert {"coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= groups
    status, body, _ = await http.get("/apis/coordination.k8s.io")
    assert body["kind"] == "APIGroup" and body["preferredVersion"]["groupVersion"] == "coordination.k8s.io/v1"
    status, _, _ = await http.get("/apis/nope.example.com")
    assert status == 404


async def test_aggregated_discovery_content_type(http: Http) -> None:
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    status, body, headers = await http.get("/apis", headers={"Accept": accept})
    assert status == 200
    assert headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    assert body["kind"] == "APIGroupDiscoveryList"
    lease = next(i for i in body["items"] if i["metadata"]["name"] == "coordination.k8s.io")
    assert lease["versions"][0]["resources"][0]["resource"] == "leases"
    status, body, _ = await http.get("/api", headers={"Accept": accept})
    core = body["items"][0]
    assert "name" not in core["metadata"]
    assert any(r["resource"] == "configmaps" for r in core["versions"][0]["resources"])


async def test_crd_is_established_and_discoverable(widgets: Http) -> None:
    status, crd, _ = await widgets.get(f"{CRDS}/widgets.example.com")
    assert status == 200
    conds = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conds["Established"]["status"] == "True" and conds["NamesAccepted"]["status"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    assert crd["spec"]["names"]["listKind"] == "WidgetList"
    status, body, _ = await widgets.get("/apis/example.com/v1")
    res = {r["name"]: r for r in body["resources"]}
    assert res["widgets"]["kind"] == "Widget" and res["widgets"]["shortNames"] == ["wd"]
    assert res["widgets"]["categories"] == ["all-widgets"] and res["widgets"]["singularName"] == "widget"
    assert res["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert res["gadgets"]["namespaced"] is False and "gadgets/status" not in res
    status, body, _ = await widgets.get("/apis/example.com")
    assert body["preferredVersion"]["version"] == "v1"


async def test_invalid_crds_are_rejected(http: Http) -> None:
    bad_name = copy.deepcopy(WIDGET_CRD)
    bad_name["metadata"]["name"] = "widgets.other.com"
    status, body, _ = await http.post(CRDS, bad_name)
    assert status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    no_storage = copy.deepcopy(WIDGET_CRD)
    no_storage["spec"]["versions"][0]["storage"] = False
    status, body, _ = await http.post(CRDS, no_storage)
    assert status == 422 and any(c["field"] == "spec.versions" for c in body["details"]["causes"])
    unstructural = copy.deepcopy(WIDGET_CRD)
    unstructural["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] = {"properties": {}}
    status, body, _ = await http.post(CRDS, unstructural)
    assert status == 422
    assert any("openAPIV3Schema" in c["field"] for c in body["details"]["causes"])


async def test_crd_delete_removes_objects_and_resource(widgets: Http, kapi: k8s.ApiClient) -> None:
    api = k8s.CustomObjectsApi(kapi)
    await api.create_namespaced_custom_object("example.com", "v1", "default", "widgets",
                                              {"apiVersion": "example.com/v1", "kind": "Widget",
                                               "metadata": {"name": "w1"}, "spec": {"size": 1}})
    status, body, _ = await widgets.delete(f"{CRDS}/widgets.example.com")
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    import asyncio

    for _ in range(50):
        status, _, _ = await widgets.get(f"{CRDS}/widgets.example.com")
        if status == 404:
            break
        await asyncio.sleep(0.05)
    assert status == 404
    status, body, _ = await widgets.get("/apis/example.com/v1/namespaces/default/widgets")
    assert status == 404 and body["reason"] == "NotFound"
    status, body, _ = await widgets.get("/apis/example.com/v1")
    assert [r["name"] for r in body["resources"]] == ["gadgets"]


async def test_crd_dir_preload(tmp_path: object) -> None:
    import yaml

    from banlieue.testing.apiserver.server import ApiServer

    d = tmp_path / "crds"  # type: ignore[operator]
    d.mkdir()
    (d / "w.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    server = ApiServer()
    assert server.load_crd_dir(d) == 1
    assert server.registry.get("example.com", "v1", "widgets") is not None


async def test_crd_update_adds_a_served_version(widgets: Http) -> None:
    _, crd, _ = await widgets.get(f"{CRDS}/widgets.example.com")
    v1 = crd["spec"]["versions"][0]
    v2 = copy.deepcopy(v1)
    v2["name"], v2["storage"] = "v2", False
    crd["spec"]["versions"].append(v2)
    status, updated, _ = await widgets.put(f"{CRDS}/widgets.example.com", crd)
    assert status == 200 and updated["metadata"]["generation"] == 2
    status, body, _ = await widgets.get("/apis/example.com")
    assert [v["version"] for v in body["versions"]] == ["v2", "v1"]
    status, w, _ = await widgets.post("/apis/example.com/v1/namespaces/default/widgets",
                                      {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"},
                                       "spec": {"size": 1}})
    assert status == 201 and w["apiVersion"] == "example.com/v1"
    status, w2, _ = await widgets.get("/apis/example.com/v2/namespaces/default/widgets/x")
    assert status == 200 and w2["apiVersion"] == "example.com/v2" and w2["spec"]["size"] == 1
    assert updated["status"]["storedVersions"] == ["v1"]


async def test_watch_ends_when_crd_is_deleted(widgets: Http) -> None:
    import asyncio

    async def delete_later() -> None:
        await asyncio.sleep(0.3)
        await widgets.delete(f"{CRDS}/gadgets.example.com")

    task = asyncio.create_task(delete_later())
    events = await widgets.watch_lines("/apis/example.com/v1/gadgets", {"timeoutSeconds": "20"}, stop_after=10)
    await task
    assert events == []


async def test_crd_immutable_fields_and_terminating_condition(widgets: Http) -> None:
    _, crd, _ = await widgets.get(f"{CRDS}/widgets.example.com")
    crd["spec"]["scope"] = "Cluster"
    status, body, _ = await widgets.put(f"{CRDS}/widgets.example.com", crd)
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.scope"
    await widgets.post("/apis/example.com/v1/namespaces/default/widgets",
                       {"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "spec": {"size": 1}})
    status, body, _ = await widgets.delete(f"{CRDS}/widgets.example.com")
    conds = {c["type"]: c["status"] for c in body["status"]["conditions"]}
    assert conds.get("Terminating") == "True"
    assert "customresourcecleanup.apiextensions.k8s.io" in body["metadata"]["finalizers"]
