"""Index functions and predicates of the Provider and VMImage controllers."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.reconcilers.provider.controller import config_maps_index, secrets_index
from banlieue.reconcilers.vmimage.controller import ProviderLookupChanged


def provider(ca: dict[str, Any] | None = None, status: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    conn: dict[str, Any] = {"endpoint": "vc", "credentialsRef": {"name": "creds"}}
    if ca is not None:
        conn["caBundle"] = ca
    obj: dict[str, Any] = {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
        "metadata": {"name": "p", "namespace": "ns", "generation": generation},
        "spec": {"providerClassRef": {"name": "vsphere"}, "connection": conn},
    }
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(
    ("ca", "secrets", "config_maps"),
    [
        pytest.param(None, ["ns/creds"], [], id="credentials-only"),
        pytest.param({"inline": "PEM"}, ["ns/creds"], [], id="inline-ca"),
        pytest.param({"secretRef": {"name": "ca"}}, ["ns/creds", "ns/ca"], [], id="ca-secret"),
        pytest.param({"configMapRef": {"name": "ca", "key": "b.pem"}}, ["ns/creds"], ["ns/ca"], id="ca-configmap"),
    ],
)
def test_indexes(ca: dict[str, Any] | None, secrets: list[str], config_maps: list[str]) -> None:
    obj = provider(ca)
    assert secrets_index(obj) == secrets
    assert config_maps_index(obj) == config_maps


def test_indexes_of_an_invalid_object_are_empty() -> None:
    bad = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"connection": {}}}
    assert secrets_index(bad) == [] and config_maps_index(bad) == []


def fds(*dcs: str) -> list[dict[str, Any]]:
    return [{"name": f"x{i}", "attributes": {"raw": {"datacenter": dc}, "capacity": {"cpuMHz": i}}} for i, dc in enumerate(dcs)]


READY_TRUE = [{"type": "Ready", "status": "True"}]
READY_FALSE = [{"type": "Ready", "status": "False"}]


@pytest.mark.parametrize(
    ("old", "new", "passes"),
    [
        pytest.param(provider(), provider(generation=2), True, id="generation-changed"),
        pytest.param(provider(status={"failureDomains": fds("DC0")}), provider(status={"failureDomains": fds("DC0", "DC1")}), True, id="datacenter-added"),
        pytest.param(provider(status={"conditions": READY_FALSE}), provider(status={"conditions": READY_TRUE}), True, id="ready-flipped"),
        pytest.param(provider(status={"failureDomains": fds("DC0", "DC0")}), provider(status={"failureDomains": fds("DC0")}), False, id="same-datacenters-capacity-only"),
        pytest.param(provider(status={"conditions": READY_TRUE}), provider(status={"conditions": [{"type": "Ready", "status": "True", "message": "x"}]}), False, id="ready-message-only"),
        pytest.param(provider(), provider(), False, id="resync"),
    ],
)
def test_provider_lookup_changed(old: dict[str, Any], new: dict[str, Any], passes: bool) -> None:
    pred = ProviderLookupChanged()
    assert pred.update(old, new) is passes
    assert pred.create(new) and pred.delete(new)


class _Providers:
    """The one cache read ``Remeasure`` makes: the Providers of a namespace."""

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = objs

    def list(self, kind: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for o in self.objs if namespace in (None, o["metadata"]["namespace"])]


def machine(provisioned: bool | None = None, provider_name: str = "p") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "m", "namespace": "ns"}, "spec": {"providerRef": {"name": provider_name}}}
    if provisioned is not None:
        obj["status"] = {"initialization": {"provisioned": provisioned}}
    return obj


async def test_remeasure_after_provisioned_or_deleted_machines_debounced() -> None:
    import asyncio

    from banlieue.reconcilers.provider.remeasure import Remeasure
    from banlieue.runtime.event import DeletedFinalStateUnknown
    from banlieue.runtime.reconcile import Request

    r = Remeasure(_Providers(provider()), debounce=0.05, interval=0.05)  # type: ignore[arg-type]
    out = r.requests()

    async def fired() -> list[Request]:
        await asyncio.sleep(0.3)  # well past the debounce window
        got: list[Request] = []
        while r._queue.qsize():
            got.append(await anext(out))
        return got

    r.on_add(machine(), False)
    r.on_update(machine(), machine(False))  # not provisioned yet: holds nothing
    r.on_update(machine(True), machine(True))  # resync: nothing changed
    r.on_update(machine(), machine(True, provider_name="other"))  # another Provider's machine
    assert await fired() == []
    # A burst (provisioned, deleted, tombstone) within the window: one re-measure.
    r.on_update(machine(False), machine(True))
    r.on_delete(machine(True))
    r.on_delete(DeletedFinalStateUnknown("ns/m", machine(True)))
    assert await fired() == [Request("ns", "p")]
    r.on_delete(machine(True))  # after the window: a new re-measure
    assert await fired() == [Request("ns", "p")]


def test_remeasure_due_at_debounces_then_keeps_the_wave_interval() -> None:
    from banlieue.reconcilers.provider.remeasure import DEBOUNCE_SECONDS, WAVE_INTERVAL_SECONDS, due_at

    assert (DEBOUNCE_SECONDS, WAVE_INTERVAL_SECONDS) == (5.0, 30.0)
    assert due_at(100.0, None, 5.0, 30.0) == 105.0  # never measured: the debounce alone
    assert due_at(100.0, 50.0, 5.0, 30.0) == 105.0  # quiet for 50 s: the debounce alone
    assert due_at(100.0, 90.0, 5.0, 30.0) == 120.0  # measured 10 s ago: 30 s after that
    assert due_at(100.0, 72.0, 5.0, 30.0) == 105.0  # 28 s ago: the debounce is later


async def test_remeasure_in_a_wave_waits_for_the_interval_after_the_last() -> None:
    """Scheduling read from the timers set, not by sleeping through them (no timing under load)."""
    import asyncio

    from banlieue.reconcilers.provider.remeasure import Remeasure
    from banlieue.runtime.reconcile import Request

    loop = asyncio.get_running_loop()
    r = Remeasure(_Providers(provider()), debounce=5.0, interval=30.0)  # type: ignore[arg-type]
    key = Request("ns", "p")
    start = loop.time()
    r.on_update(machine(False), machine(True))
    first = r._due[key]
    assert start + 5.0 <= first.when() <= loop.time() + 5.0
    r.on_delete(machine(True))  # joins the due one
    assert r._due[key] is first
    first.cancel()
    r._fire(key)  # as the timer would: handed out now
    assert r._queue.get_nowait() == key and key not in r._due
    fired = r._last[key]
    r.on_update(machine(False), machine(True))  # the wave goes on: 30 s after the last, not 5
    second = r._due[key]
    assert second.when() == fired + 30.0
    second.cancel()
    r._last[key] = fired - 40.0  # a quiet spell since: the debounce again
    del r._due[key]
    now = loop.time()
    r.on_delete(machine(True))
    assert now + 5.0 <= r._due[key].when() <= loop.time() + 5.0
    r._due[key].cancel()
