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

    r = Remeasure(_Providers(provider()), debounce=0.05)  # type: ignore[arg-type]
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
