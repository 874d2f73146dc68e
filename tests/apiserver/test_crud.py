"""Create/get/list/update/delete with real Status errors, through kubernetes-asyncio and raw HTTP."""

from __future__ import annotations

import base64

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from banlieue.testing.apiserver.fixture import ApiServerHandle

from .conftest import WIDGETS, Http, widget

CMS = "/api/v1/namespaces/default/configmaps"


def cm(name: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def test_default_namespaces_exist(kapi: k8s.ApiClient) -> None:
    names = {n.metadata.name for n in (await k8s.CoreV1Api(kapi).list_namespace()).items}
    assert {"default", "kube-system", "kube-public"} <= names


async def test_configmap_crud_with_kubernetes_asyncio(kapi: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kapi)
    created = await core.create_namespaced_config_map("default", cm("c1", a="1"))
    md = created.metadata
    assert md.uid and md.resource_version and md.creation_timestamp is not None
    got = await core.read_namespaced_config_map("c1", "default")
    assert got.data == {"a": "1"}
    got.data["b"] = "2"
    updated = await core.replace_namespaced_config_map("c1", "default", got)
    assert int(updated.metadata.resource_version) > int(md.resource_version)
    listed = await core.list_namespaced_config_map("default")
    assert [c.metadata.name for c in listed.items] == ["c1"]
    assert int(listed.metadata.resource_version) >= int(updated.metadata.resource_version)
    status = await core.delete_namespaced_config_map("c1", "default")
    assert status.status == "Success"
    with pytest.raises(ApiException) as ei:
        await core.read_namespaced_config_map("c1", "default")
    assert ei.value.status == 404


async def test_error_shapes(http: Http) -> None:
    status, body, _ = await http.get(f"{CMS}/missing")
    assert status == 404
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": 'configmaps "missing" not found', "reason": "NotFound",
                    "details": {"name": "missing", "kind": "configmaps"}, "code": 404}
    assert (await http.post(CMS, cm("dup")))[0] == 201
    status, body, _ = await http.post(CMS, cm("dup"))
    assert status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "dup" already exists'
    status, body, _ = await http.post(CMS, cm("Bad_Name"))
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
                                      "a lowercase RFC 1123 subdomain")
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueInvalid", "field": "metadata.name",
        "message": body["details"]["causes"][0]["message"]}
    status, body, _ = await http.post("/api/v1/namespaces/nope/configmaps", cm("x"))
    assert status == 404 and body["message"] == 'namespaces "nope" not found'
    other = cm("x")
    other["metadata"]["namespace"] = "kube-system"  # type: ignore[index]
    status, body, _ = await http.post(CMS, other)
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await http.post(CMS, "{not json")
    assert status == 400 and body["reason"] == "BadRequest"
    status, body, _ = await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueRequired"
    status, body, _ = await http.post(f"{CMS}/dup", cm("dup"))
    assert status == 405 and body["reason"] == "MethodNotAllowed"
    assert body["message"] == "the server does not allow this method on the requested resource"
    status, body, _ = await http.get("/api/v1/nothings")
    assert status == 404 and body["message"] == "the server could not find the requested resource"
    status, body, _ = await http.post(CMS, cm("y"), ctype="text/plain")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"


async def test_stale_update_conflicts(http: Http) -> None:
    _, first, _ = await http.post(CMS, cm("c", a="1"))
    newer = dict(first, data={"a": "2"})
    status, second, _ = await http.put(f"{CMS}/c", newer)
    assert status == 200
    status, body, _ = await http.put(f"{CMS}/c", dict(first, data={"a": "3"}))
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "c": the object has been modified; '
                               "please apply your changes to the latest version and try again")
    status, body, _ = await http.put(f"{CMS}/other", second)
    assert status == 400 and "does not match the name on the URL" in body["message"]
    status, body, _ = await http.put(f"{CMS}/absent", cm("absent"))
    assert status == 404


async def test_noop_update_keeps_resource_version(http: Http) -> None:
    _, obj, _ = await http.post(CMS, cm("n", a="1"))
    status, again, _ = await http.put(f"{CMS}/n", obj)
    assert status == 200 and again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


async def test_generate_name_and_dry_run(http: Http, apiserver: ApiServerHandle) -> None:
    status, body, _ = await http.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"generateName": "gen-"}})
    assert status == 201 and body["metadata"]["name"].startswith("gen-") and len(body["metadata"]["name"]) == 9
    rv_before = apiserver.server.store.rv
    status, body, _ = await http.post(CMS, cm("dry"), params={"dryRun": "All"})
    assert status == 201 and body["metadata"]["uid"] and "resourceVersion" not in body["metadata"]
    assert (await http.get(f"{CMS}/dry"))[0] == 404
    assert apiserver.server.store.rv == rv_before
    status, body, _ = await http.post(CMS, cm("dry"), params={"dryRun": "Bogus"})
    assert status == 422
    assert (await http.post(CMS, cm("real")))[0] == 201
    status, _, _ = await http.delete(f"{CMS}/real", params={"dryRun": "All"})
    assert status == 200 and (await http.get(f"{CMS}/real"))[0] == 200


async def test_secret_string_data_and_type(kapi: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kapi)
    s = await core.create_namespaced_secret("default", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"a": base64.b64encode(b"x").decode()}, "stringData": {"b": "hello"}})
    assert s.type == "Opaque"
    assert base64.b64decode(s.data["b"]) == b"hello" and base64.b64decode(s.data["a"]) == b"x"
    assert not getattr(s, "string_data", None)


async def test_leases_and_events(kapi: k8s.ApiClient) -> None:
    coord = k8s.CoordinationV1Api(kapi)
    lease = await coord.create_namespaced_lease("kube-system", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})
    lease.spec.holder_identity = "b"
    lease = await coord.replace_namespaced_lease("leader", "kube-system", lease)
    assert lease.spec.holder_identity == "b"
    ev = k8s.EventsV1Api(kapi)
    with pytest.raises(ApiException) as ei:
        await ev.create_namespaced_event("default", {"apiVersion": "events.k8s.io/v1", "kind": "Event",
                                                     "metadata": {"name": "e0"}})
    assert ei.value.status == 422
    await ev.create_namespaced_event("default", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "banlieue.io/controller",
        "reportingInstance": "x", "action": "Reconcile", "reason": "Created", "type": "Normal",
        "regarding": {"kind": "ConfigMap", "name": "c", "namespace": "default"}, "note": "hello"})
    core_events = await k8s.CoreV1Api(kapi).list_namespaced_event("default")
    assert [e.message for e in core_events.items] == ["hello"]


async def test_namespace_lifecycle(http: Http) -> None:
    status, ns, _ = await http.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": "team"}})
    assert status == 201 and ns["status"]["phase"] == "Active" and ns["spec"]["finalizers"] == ["kubernetes"]
    status, body, _ = await http.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                             "metadata": {"name": "a.b"}})
    assert status == 422 and "RFC 1123 label" in body["message"]
    await http.post("/api/v1/namespaces/team/configmaps", cm("inside"))
    status, body, _ = await http.delete("/api/v1/namespaces/team")
    assert status == 200 and body["status"]["phase"] == "Terminating"
    import asyncio

    for _ in range(50):
        if (await http.get("/api/v1/namespaces/team"))[0] == 404:
            break
        await asyncio.sleep(0.05)
    assert (await http.get("/api/v1/namespaces/team"))[0] == 404
    assert (await http.get("/api/v1/namespaces/team/configmaps/inside"))[0] == 404


async def test_custom_resource_crud_and_generation(widgets: Http) -> None:
    status, w, _ = await widgets.post(WIDGETS, widget("w1", 2, labels={"app": "x"}))
    assert status == 201 and w["metadata"]["generation"] == 1 and w["spec"]["color"] == "red"
    status, body, _ = await widgets.put(f"{WIDGETS}/w1", {**w, "metadata": {**w["metadata"], "resourceVersion": ""}})
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    w2 = {**w, "metadata": {**w["metadata"], "labels": {"app": "y"}}, "status": {"phase": "Ignored"}}
    status, w2, _ = await widgets.put(f"{WIDGETS}/w1", w2)
    assert status == 200 and w2["metadata"]["generation"] == 1 and "status" not in w2
    w3 = {**w2, "spec": {**w2["spec"], "size": 5}}
    status, w3, _ = await widgets.put(f"{WIDGETS}/w1", w3)
    assert w3["metadata"]["generation"] == 2
    st = {**w3, "spec": {"size": 99}, "status": {"phase": "Ready"}}
    status, w4, _ = await widgets.put(f"{WIDGETS}/w1/status", st)
    assert status == 200 and w4["status"] == {"phase": "Ready"} and w4["spec"]["size"] == 5
    assert w4["metadata"]["generation"] == 2
    status, body, _ = await widgets.post(WIDGETS, widget("bad", 0))
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.size"
    status, body, _ = await widgets.delete(f"{WIDGETS}/w1")
    # kube-apiserver v1.34.4 answers an immediate delete of a custom resource with a Status
    # Success naming it (tests/envtest/test_differential.py), not with the object.
    assert status == 200 and body["kind"] == "Status" and body["status"] == "Success"
    assert body["details"]["name"] == "w1" and body["details"]["kind"] == "widgets"
    status, gadget, _ = await widgets.post("/apis/example.com/v1/gadgets", {
        "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}, "anything": {"x": 1}})
    assert status == 201 and gadget["anything"] == {"x": 1} and "namespace" not in gadget["metadata"]


async def test_field_validation_modes(widgets: Http) -> None:
    body = widget("fv", 1)
    body["spec"]["foo"] = 1
    status, out, _ = await widgets.post(WIDGETS, body, params={"fieldValidation": "Strict"})
    assert status == 400 and out["reason"] == "BadRequest"
    assert out["message"] == ('Widget in version "v1" cannot be handled as a Widget: '
                              'strict decoding error: unknown field "spec.foo"')
    dup = '{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "d"}, "spec": {"size": 1, "size": 2}}'
    status, out, _ = await widgets.post(WIDGETS, dup, params={"fieldValidation": "Strict"})
    assert status == 400 and 'duplicate field "size"' in out["message"]
    status, out, headers = await widgets.post(WIDGETS, dup)
    assert status == 201 and out["spec"]["size"] == 2 and '299 - "duplicate field \\"size\\""' in headers.getall("Warning")
    status, out, _ = await widgets.patch(f"{WIDGETS}/d", {"spec": {"bar": 1}}, "application/merge-patch+json",
                                         params={"fieldValidation": "Strict"})
    assert status == 400 and out["message"] == 'strict decoding error: unknown field "spec.bar"'
    status, out, headers = await widgets.post(WIDGETS, body, params={"fieldValidation": "Warn"})
    assert status == 201 and "foo" not in out["spec"]
    assert headers.getall("Warning") == ['299 - "unknown field \\"spec.foo\\""']
    body["metadata"]["name"] = "fv2"
    status, out, headers = await widgets.post(WIDGETS, body, params={"fieldValidation": "Ignore"})
    assert status == 201 and "Warning" not in headers
    status, out, _ = await widgets.post(WIDGETS, body, params={"fieldValidation": "Nope"})
    assert status == 422 and out["details"]["kind"] == "CreateOptions"


async def test_create_rejects_resource_version_and_deletion_bumps_generation(widgets: Http) -> None:
    body = widget("rv", 1)
    body["metadata"]["resourceVersion"] = "5"
    status, out, _ = await widgets.post(WIDGETS, body)
    assert status == 400 and out["message"] == "resourceVersion should not be set on objects to be created"
    _, w, _ = await widgets.post(WIDGETS, widget("gen", 1, finalizers=["example.com/x"]))
    _, deleting, _ = await widgets.delete(f"{WIDGETS}/gen")
    assert deleting["metadata"]["generation"] == w["metadata"]["generation"] + 1
    _, again, _ = await widgets.delete(f"{WIDGETS}/gen")
    assert again["metadata"]["generation"] == deleting["metadata"]["generation"]
    assert again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]


async def test_subprocess_server(tmp_path: object) -> None:
    import json as _json

    import aiohttp
    import yaml

    from banlieue.testing.apiserver.fixture import start_subprocess

    from .conftest import WIDGET_CRD

    d = tmp_path / "crds"  # type: ignore[operator]
    d.mkdir()
    (d / "widget.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    with start_subprocess(crd_dir=d) as proc:
        assert proc.url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as s:
            async with s.get(proc.url + "/apis/example.com/v1") as r:
                assert r.status == 200
                assert "widgets" in [x["name"] for x in (await r.json())["resources"]]
            async with s.post(proc.url + WIDGETS, data=_json.dumps(widget("sub", 1)),
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 201
    assert proc.process.returncode is not None


async def test_content_negotiation(widgets: Http) -> None:
    import yaml

    await widgets.post(CMS, cm("neg", a="1"))
    status, body, headers = await widgets.get(f"{CMS}/neg", headers={"Accept": "application/yaml"})
    assert status == 200 and headers["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(body)["data"] == {"a": "1"}
    status, body, _ = await widgets.get(f"{CMS}/neg", headers={"Accept": "application/vnd.kubernetes.protobuf, application/json"})
    assert status == 200 and body["data"] == {"a": "1"}
    status, body, _ = await widgets.get(WIDGETS, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert status == 406 and body["reason"] == "NotAcceptable"
    status, body, _ = await widgets.get(f"{CMS}/neg", headers={"Accept": "text/html"})
    assert status == 406
    status, body, _ = await widgets.post(CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"},
                                               "data": {"k": 1}})
    assert status == 400 and "cannot unmarshal" in body["message"]


async def test_terminating_namespace_refuses_new_content(http: Http) -> None:
    status, body, _ = await http.delete("/api/v1/namespaces/default")
    assert status == 403 and body["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    await http.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bye"}})
    held = cm("held")
    held["metadata"]["finalizers"] = ["example.com/hold"]  # type: ignore[index]
    await http.post("/api/v1/namespaces/bye/configmaps", held)
    await http.delete("/api/v1/namespaces/bye")
    status, body, _ = await http.post("/api/v1/namespaces/bye/configmaps", cm("late"))
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == ('configmaps "late" is forbidden: unable to create new content in namespace bye '
                               "because it is being terminated")


async def test_namespace_finalize_subresource(http: Http) -> None:
    await http.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fin"}})
    _, ns, _ = await http.get("/api/v1/namespaces/fin")
    ns["spec"]["finalizers"] = []
    ns["metadata"]["labels"]["ignored"] = "yes"
    status, out, _ = await http.put("/api/v1/namespaces/fin/finalize", ns)
    assert status == 200 and out["spec"]["finalizers"] == [] and "ignored" not in out["metadata"]["labels"]


async def test_cel_transition_rule_and_ratcheting(http: Http) -> None:
    import copy

    from .conftest import WIDGET_CRD

    crd = copy.deepcopy(WIDGET_CRD)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["color"]["x-kubernetes-validations"] = [
        {"rule": "self == oldSelf", "message": "color is immutable"}]
    assert (await http.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[0] == 201
    _, w, _ = await http.post(WIDGETS, widget("cel", 1))
    w["spec"]["color"] = "blue"
    status, body, _ = await http.put(f"{WIDGETS}/cel", w)
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec.color"
    assert "color is immutable" in body["message"]
