"""Client against the API double: CRUD, patch, apply, finalizers, conflict retry, error mapping,
429 Retry-After and 5xx retries."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import REGISTRY
from runtime_helpers import Faults, new_client, widget

from banlieue.runtime.client import Client, retry_on_conflict
from banlieue.runtime.config import load_config
from banlieue.runtime.errors import AlreadyExists, Conflict, Invalid, NotFound, ServerError
from banlieue.runtime.kinds import CONFIG_MAP, ResourceKind


def config_map(name: str, namespace: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace,
            "labels": {"app": "x"}}, "data": dict(data)}


async def test_crud_round_trip_and_error_mapping(client: Client, namespace: str) -> None:
    created = await client.create(CONFIG_MAP, config_map("a", namespace, k="1"))
    assert created["metadata"]["resourceVersion"]
    with pytest.raises(AlreadyExists):
        await client.create(CONFIG_MAP, config_map("a", namespace))
    got = await client.get(CONFIG_MAP, "a", namespace)
    assert got["data"] == {"k": "1"}
    got["data"]["k"] = "2"
    updated = await client.update(CONFIG_MAP, got)
    assert updated["data"]["k"] == "2"
    with pytest.raises(Conflict):
        await client.update(CONFIG_MAP, got)  # stale resourceVersion
    listed = await client.list(CONFIG_MAP, namespace, label_selector="app=x")
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a"]
    await client.delete(CONFIG_MAP, "a", namespace)
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "a", namespace)
    with pytest.raises(NotFound):
        await client.delete(CONFIG_MAP, "a", namespace)
    await client.delete(CONFIG_MAP, "a", namespace, ignore_not_found=True)


async def test_invalid_carries_causes(client: Client, namespace: str) -> None:
    with pytest.raises(Invalid) as info:
        await client.create(CONFIG_MAP, config_map("Not_A_Valid_Name", namespace))
    assert info.value.status == 422


async def test_paginated_list_follows_continue(client: Client, namespace: str) -> None:
    for i in range(7):
        await client.create(CONFIG_MAP, config_map(f"cm-{i}", namespace))
    names, token = [], None
    while True:
        page = await client.list(CONFIG_MAP, namespace, limit=3, continue_=token)
        assert len(page["items"]) <= 3
        names += [o["metadata"]["name"] for o in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert sorted(names) == [f"cm-{i}" for i in range(7)]


async def test_merge_json_status_patch_and_apply(client: Client, namespace: str, widgets: ResourceKind) -> None:
    await client.create(widgets, widget("w", namespace, size=1))
    merged = await client.patch(widgets, "w", namespace, {"spec": {"color": "red"}})
    assert merged["spec"] == {"size": 1, "color": "red"}
    ops = [{"op": "replace", "path": "/spec/size", "value": 2}]
    patched = await client.patch(widgets, "w", namespace, ops, patch_type="json")
    assert patched["spec"]["size"] == 2
    status = await client.patch_status(widgets, "w", namespace, {"status": {"ready": True}})
    assert status["status"] == {"ready": True}
    # the status subresource ignores spec; the main resource ignores status
    ignored = await client.patch_status(widgets, "w", namespace, {"spec": {"size": 99}})
    assert ignored["spec"]["size"] == 2
    applied = await client.apply(widgets, widget("w", namespace, size=3, shape="round"), field_manager="banlieue.io/test")
    assert applied["spec"]["shape"] == "round" and applied["spec"]["size"] == 3
    created = await client.apply(widgets, widget("fresh", namespace, size=5), field_manager="banlieue.io/test")
    assert created["metadata"]["uid"]
    body = {"apiVersion": widgets.api_version, "kind": "Widget", "metadata": {"name": "w", "namespace": namespace},
            "status": {"phase": "Done"}}
    st = await client.apply_status(widgets, body, field_manager="banlieue.io/test")
    assert st["status"]["phase"] == "Done"


async def test_finalizers_are_added_and_removed_across_a_stale_read(client: Client, other_client: Client, namespace: str) -> None:
    obj = await client.create(CONFIG_MAP, config_map("f", namespace))
    # another writer bumps the resourceVersion: our copy is now stale
    await other_client.patch(CONFIG_MAP, "f", namespace, {"data": {"touched": "yes"}})
    with_f = await client.add_finalizer(CONFIG_MAP, obj, "banlieue.io/test")
    assert with_f["metadata"]["finalizers"] == ["banlieue.io/test"]
    assert with_f["data"] == {"touched": "yes"}
    again = await client.add_finalizer(CONFIG_MAP, with_f, "banlieue.io/test")
    assert again["metadata"]["finalizers"] == ["banlieue.io/test"]
    await client.delete(CONFIG_MAP, "f", namespace)
    terminating = await client.get(CONFIG_MAP, "f", namespace)
    assert terminating["metadata"].get("deletionTimestamp")
    # with_f predates the delete (stale resourceVersion): Conflict, re-read, retry
    await client.remove_finalizer(CONFIG_MAP, with_f, "banlieue.io/test")
    with pytest.raises(NotFound):
        await client.get(CONFIG_MAP, "f", namespace)


async def test_retry_on_conflict_survives_injected_409s(client: Client, namespace: str, faults: Faults) -> None:
    await client.create(CONFIG_MAP, config_map("c", namespace))
    await faults.set(errors=[{"status": 409, "method": "PUT", "path": "/configmaps/c$", "times": 3}])
    attempts = 0

    async def bump() -> dict[str, object]:
        nonlocal attempts
        attempts += 1
        cur = await client.get(CONFIG_MAP, "c", namespace)
        cur["data"] = {"n": str(attempts)}
        return await client.update(CONFIG_MAP, cur)

    result = await retry_on_conflict(bump)
    assert attempts == 4
    assert result["data"] == {"n": "4"}


async def test_conflict_retry_gives_up_after_five_steps(client: Client, namespace: str, faults: Faults) -> None:
    await client.create(CONFIG_MAP, config_map("g", namespace))
    await faults.set(errors=[{"status": 409, "method": "PUT", "path": "/configmaps/g$"}])

    async def bump() -> dict[str, object]:
        cur = await client.get(CONFIG_MAP, "g", namespace)
        return await client.update(CONFIG_MAP, cur)

    with pytest.raises(Conflict):
        await retry_on_conflict(bump)


async def test_429_retry_after_is_honoured(client: Client, namespace: str, faults: Faults) -> None:
    await client.create(CONFIG_MAP, config_map("t", namespace))
    await faults.set(errors=[{"status": 429, "method": "GET", "path": "/configmaps/t$", "times": 2, "retryAfter": 1}])
    started = time.monotonic()
    got = await client.get(CONFIG_MAP, "t", namespace)
    assert got["metadata"]["name"] == "t"
    assert time.monotonic() - started >= 1.9  # two Retry-After: 1 s waits


async def test_5xx_retried_for_idempotent_verbs_only(client: Client, namespace: str, faults: Faults) -> None:
    await client.create(CONFIG_MAP, config_map("s", namespace))
    await faults.set(errors=[{"status": 500, "method": "GET", "path": "/configmaps/s$", "times": 2}])
    assert (await client.get(CONFIG_MAP, "s", namespace))["metadata"]["name"] == "s"
    await faults.set(errors=[{"status": 500, "method": "POST", "path": "/configmaps$", "times": 1}])
    with pytest.raises(ServerError):
        await client.create(CONFIG_MAP, config_map("s2", namespace))
    await client.create(CONFIG_MAP, config_map("s2", namespace))  # the rule fired once


async def test_client_side_qps_limit_and_request_metric(apiserver: Any, namespace: str) -> None:
    limited = new_client(apiserver, qps=10.0, burst=1)
    try:
        before = REGISTRY.get_sample_value(
            "rest_client_requests_total", {"code": "404", "method": "GET", "host": limited.host}) or 0.0
        started = time.monotonic()
        for _ in range(4):
            with pytest.raises(NotFound):
                await limited.get(CONFIG_MAP, "missing", namespace)
        assert time.monotonic() - started >= 0.25  # 1 token at once, then one per 100 ms
        after = REGISTRY.get_sample_value(
            "rest_client_requests_total", {"code": "404", "method": "GET", "host": limited.host})
        assert after == before + 4
    finally:
        await limited.close()


async def test_client_from_kubeconfig(apiserver: Any, namespace: str) -> None:
    configuration = await load_config(apiserver.kubeconfig_path)
    from_file = Client(configuration)
    try:
        listed = await from_file.list(CONFIG_MAP, namespace)
        assert listed["items"] == []
    finally:
        await from_file.close()
