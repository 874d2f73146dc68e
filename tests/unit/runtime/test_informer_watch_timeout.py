"""The informers' watch timeout (issue 22): kube-apiserver's own default, not client-go's 5-10 min."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from banlieue.reconcilers.vspherecluster.controller import capi_watch_timeout
from banlieue.runtime.informer import MIN_WATCH_TIMEOUT_SECONDS, Informer
from banlieue.runtime.kinds import CONFIG_MAP


class _Client:
    """``watch`` records what it was asked and answers one bookmark."""

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    def watch(self, kind: Any, namespace: Any, **params: Any) -> AsyncIterator[dict[str, Any]]:
        self.asked.append(params)

        async def events() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}

        return events()


async def test_watches_ask_for_30_to_60_minutes_like_kube_apiservers_default() -> None:
    """Each informer re-opened its watch every 5-10 minutes (client-go's [300, 600) s): with ten
    informers, 1.8 idle requests a minute. kube-apiserver's [--min-request-timeout, 2x) with its
    1,800 s default is asked instead."""
    client = _Client()
    informer = Informer(client, CONFIG_MAP, namespace="ns")  # type: ignore[arg-type]
    for _ in range(200):
        await informer._watch_once()
    timeouts = [p["timeout_seconds"] for p in client.asked]
    assert MIN_WATCH_TIMEOUT_SECONDS == 1800
    assert all(1800 <= t < 3600 for t in timeouts) and len(set(timeouts)) > 100, "uniform, not one value"
    assert all(p["allow_bookmarks"] and p["resource_version"] == "7" for p in client.asked[1:]), "resumed from the bookmark"
    assert all(1800 <= capi_watch_timeout() < 3600 for _ in range(100))
