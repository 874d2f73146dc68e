"""Fault injection (Python handle and /debug/faults) and the request log."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from banlieue.testing.apiserver.fixture import ApiServerHandle

from .conftest import Http

CMS = "/api/v1/namespaces/default/configmaps"


def cm(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


async def test_error_rules_from_python(http: Http, apiserver: ApiServerHandle) -> None:
    rule = apiserver.server.faults.add_error(429, method="POST", path=r"/configmaps$", times=2, retry_after=3)
    for _ in range(2):
        status, body, headers = await http.post(CMS, cm("x"))
        assert status == 429 and body["reason"] == "TooManyRequests" and headers["Retry-After"] == "3"
    assert (await http.post(CMS, cm("x")))[0] == 201
    assert rule.fired == 2
    apiserver.server.faults.add_error(500, method="GET", path=r"/configmaps/x$")
    status, body, _ = await http.get(f"{CMS}/x")
    assert status == 500 and body["reason"] == "InternalError"
    assert (await http.get(CMS))[0] == 200
    apiserver.server.faults.clear()
    apiserver.server.faults.add_error(409, method="PUT")
    status, body, _ = await http.put(f"{CMS}/x", cm("x"))
    assert status == 409 and body["reason"] == "Conflict"


async def test_error_rate(http: Http, apiserver: ApiServerHandle) -> None:
    apiserver.server.faults.rng.seed(7)
    apiserver.server.faults.add_error(500, rate=0.5, method="GET")
    codes = [(await http.get(CMS))[0] for _ in range(40)]
    assert 5 < codes.count(500) < 35 and codes.count(200) == 40 - codes.count(500)


async def test_faults_over_http(http: Http) -> None:
    status, body, _ = await http.post("/debug/faults", {"errors": [{"status": 500, "method": "DELETE", "times": 1}],
                                                        "latency": 0.2})
    assert status == 200 and body["errors"][0]["status"] == 500 and body["latency"] == 0.2
    started = time.monotonic()
    assert (await http.get(CMS))[0] == 200
    assert time.monotonic() - started >= 0.2
    status, body, _ = await http.get("/debug/faults")
    assert body["errors"][0]["times"] == 1
    status, body, _ = await http.req("DELETE", "/debug/faults")
    assert body == {"errors": [], "latency": 0.0, "freezeWatches": False, "expireNextWatches": 0}
    status, body, _ = await http.post("/debug/faults", {"errors": [{"status": 418}]})
    assert status == 400


async def test_drop_and_expire_watches(http: Http, apiserver: ApiServerHandle) -> None:
    async def watch_until_closed() -> float:
        started = time.monotonic()
        async with http.session.get(http.url + CMS, params={"watch": "1", "timeoutSeconds": "30"}) as r:
            async for _ in r.content:
                pass
        return time.monotonic() - started

    task = asyncio.create_task(watch_until_closed())
    await asyncio.sleep(0.3)
    status, _, _ = await http.post("/debug/faults", {"dropWatches": True})
    assert status == 200
    assert await asyncio.wait_for(task, 5) < 5
    apiserver.server.faults.expire_next_watches = 1
    events = await http.watch_lines(CMS, {"resourceVersion": "0", "timeoutSeconds": "1"})
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
    events = await http.watch_lines(CMS, {"resourceVersion": "0", "timeoutSeconds": "1"})
    assert not events or events[0]["type"] != "ERROR"


async def test_frozen_watch_sends_nothing(http: Http, apiserver: ApiServerHandle) -> None:
    apiserver.server.faults.freeze_watches = True
    task = asyncio.create_task(http.watch_lines(CMS, {"allowWatchBookmarks": "true", "timeoutSeconds": "2"},
                                                stop_after=3))
    await asyncio.sleep(0.3)
    await http.post(CMS, cm("during-freeze"))
    events = await task
    assert events == []
    apiserver.server.faults.freeze_watches = False
    events = await http.watch_lines(CMS, {"timeoutSeconds": "1"})
    assert [e["object"]["metadata"]["name"] for e in events] == ["during-freeze"]


async def test_request_log(http: Http, apiserver: ApiServerHandle) -> None:
    await http.post(CMS, cm("logged"))
    await http.get(f"{CMS}/logged", headers={"User-Agent": "probe/1.0"})
    writes = apiserver.server.request_log(method="POST", path_contains="/configmaps")
    assert [(r.method, r.status) for r in writes] == [("POST", 201)]
    gets = [r for r in apiserver.server.request_log(method="GET") if r.user_agent == "probe/1.0"]
    assert gets and gets[0].path == f"{CMS}/logged" and gets[0].status == 200
    async with aiohttp.ClientSession() as s, s.get(apiserver.url + "/debug/requests") as r:
        items = (await r.json())["items"]
    assert any(i["method"] == "POST" and i["status"] == 201 and i["path"] == CMS for i in items)
    async with aiohttp.ClientSession() as s, s.get(apiserver.url + "/debug/requests",
                                                   params={"method": "POST", "pathContains": "/configmaps"}) as r:
        items = (await r.json())["items"]
    assert [(i["method"], i["path"], i["status"]) for i in items] == [("POST", CMS, 201)]


async def test_error_rule_on_query(http: Http, apiserver: ApiServerHandle) -> None:
    apiserver.server.faults.add_error(500, method="GET", path=r"/configmaps$", query=r"watch=(1|true)")
    assert (await http.get(CMS))[0] == 200
    status, _, _ = await http.get(CMS, params={"watch": "1", "timeoutSeconds": "1"})
    assert status == 500


async def test_apiserver_factory_preloads_crds(apiserver_factory: Any, tmp_path: Any) -> None:
    import yaml

    from .conftest import WIDGET_CRD

    (tmp_path / "w.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    handle = await apiserver_factory(crd_dir=tmp_path, history_size=5)
    async with aiohttp.ClientSession() as s, s.get(handle.url + "/apis/example.com/v1") as r:
        assert r.status == 200
    assert handle.server.store.history_size == 5 and handle.kubeconfig_path.exists()


def test_request_log_size_flag_bounds_the_log() -> None:
    # ``python -m banlieue.testing.apiserver --request-log-size N`` keeps the last N requests
    # (bench/e2e.py raises it for 10,000 VMs; the default 100,000 would drop the first writes).
    import json
    import urllib.request

    from banlieue.testing.apiserver.fixture import start_subprocess

    with start_subprocess(request_log_size=3) as proc:
        for i in range(5):
            urllib.request.urlopen(f"{proc.url}/api/v1/namespaces/default/configmaps?limit={i + 1}").read()
        with urllib.request.urlopen(proc.url + "/debug/requests") as r:
            items = json.load(r)["items"]
    assert [i["query"] for i in items] == ["limit=3", "limit=4", "limit=5"]  # the oldest two dropped
