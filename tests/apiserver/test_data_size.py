"""Secrets and ConfigMaps hold at most 1 MiB (kube ``api.MaxSecretSize``), on create, update and
patch: 422 Invalid with kube's message, over raw HTTP and through kubernetes-asyncio."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from .conftest import Http

MIB = 1024 * 1024
SECRETS = "/api/v1/namespaces/default/secrets"
CMS = "/api/v1/namespaces/default/configmaps"
MERGE = "application/merge-patch+json"
SECRET_TOO_LONG = 'Secret "s" is invalid: data: Too long: must have at most 1048576 bytes'
CM_TOO_LONG = 'ConfigMap "c" is invalid: []: Too long: must have at most 1048576 bytes'


def b64(n: int, byte: bytes = b"x") -> str:
    return base64.b64encode(byte * n).decode()


def secret(**data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": data}


def config_map(data: dict[str, str], binary: dict[str, str] | None = None) -> dict[str, object]:
    body: dict[str, object] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}
    if binary is not None:
        body["binaryData"] = binary
    return body


def assert_too_long(status: int, body: dict[str, object], message: str, field: str) -> None:
    assert status == 422, body
    assert body["reason"] == "Invalid" and body["message"] == message
    assert body["details"]["causes"] == [  # type: ignore[index]
        {"reason": "FieldValueTooLong", "message": "Too long: must have at most 1048576 bytes", "field": field}]


async def test_secret_limit_counts_decoded_bytes_of_all_keys(http: Http) -> None:
    # Exactly 1 MiB decoded (about 1.33 MiB of base64 on the wire) is allowed.
    status, body, _ = await http.post(SECRETS, secret(a=b64(MIB - 10), b=b64(10)))
    assert status == 201, body
    await http.delete(f"{SECRETS}/s")
    status, body, _ = await http.post(SECRETS, secret(a=b64(MIB - 10), b=b64(11)))
    assert_too_long(status, body, SECRET_TOO_LONG, "data")
    assert (await http.get(f"{SECRETS}/s"))[0] == 404


async def test_secret_string_data_counts_after_the_merge(http: Http) -> None:
    body = {**secret(a=b64(MIB)), "stringData": {"b": "y"}}
    status, out, _ = await http.post(SECRETS, body)
    assert_too_long(status, out, SECRET_TOO_LONG, "data")


async def test_secret_update_and_patch_past_the_limit_are_refused(http: Http) -> None:
    status, created, _ = await http.post(SECRETS, secret(a=b64(MIB // 2)))
    assert status == 201
    grown = {**created, "data": {"a": b64(MIB // 2), "b": b64(MIB // 2 + 1)}}
    status, out, _ = await http.put(f"{SECRETS}/s", grown)
    assert_too_long(status, out, SECRET_TOO_LONG, "data")
    status, out, _ = await http.patch(f"{SECRETS}/s", {"data": {"b": b64(MIB // 2 + 1)}}, MERGE)
    assert_too_long(status, out, SECRET_TOO_LONG, "data")
    status, out, _ = await http.patch(f"{SECRETS}/s", {"data": {"b": b64(MIB // 2)}}, MERGE)
    assert status == 200 and set(out["data"]) == {"a", "b"}


async def test_configmap_limit_counts_data_bytes_plus_decoded_binary_data(http: Http) -> None:
    # "é" is two UTF-8 bytes: the limit is on bytes, not characters.
    status, body, _ = await http.post(CMS, config_map({"t": "é" * (MIB // 4)}, {"bin": b64(MIB // 2)}))
    assert status == 201, body
    await http.delete(f"{CMS}/c")
    status, body, _ = await http.post(CMS, config_map({"t": "é" * (MIB // 4)}, {"bin": b64(MIB // 2 + 1)}))
    assert_too_long(status, body, CM_TOO_LONG, "[]")
    status, body, _ = await http.post(CMS, config_map({"t": "é" * (MIB // 2) + "x"}))
    assert_too_long(status, body, CM_TOO_LONG, "[]")


async def test_kubernetes_asyncio_sees_422(kapi: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(kapi)
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_secret("default", k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name="s"), string_data={"k": "z" * (MIB + 1)}))
    assert raised.value.status == 422
    assert json.loads(raised.value.body or "{}")["message"] == SECRET_TOO_LONG
