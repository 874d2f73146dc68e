"""Per-vCenter worker cap (banlieue.reconcilers.vspheremachine.vcenter_slots): take/release/cap (never waits), the waiting list and its wake channel."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from banlieue.api.infrastructure import VSphereMachine
from banlieue.backends.base import Connection
from banlieue.backends.vsphere import VSphereBackend
from banlieue.reconcilers.vspheremachine.vcenter_slots import (
    VCenterSlots,
    cap_for_workers,
    slot_key,
    vm_exists,
)
from banlieue.runtime import Request


@pytest.mark.parametrize(("workers", "cap"), [(1, 1), (2, 1), (3, 1), (4, 2), (10, 5), (11, 5)])
def test_cap_is_half_the_workers_and_at_least_one(workers: int, cap: int) -> None:
    assert cap_for_workers(workers) == cap


def test_take_up_to_the_cap_then_refuse_without_waiting() -> None:
    s = VCenterSlots(2)
    assert s.try_acquire("vc-a") and s.try_acquire("vc-a")
    assert not s.try_acquire("vc-a"), "third slot on a full vCenter"
    assert s.held("vc-a") == 2, "a refused take holds nothing"


def test_a_full_vcenter_does_not_block_another() -> None:
    s = VCenterSlots(1)
    assert s.try_acquire("vc-a")
    assert not s.try_acquire("vc-a")
    assert s.try_acquire("vc-b")
    assert (s.held("vc-a"), s.held("vc-b")) == (1, 1)


def test_release_frees_a_slot_for_the_same_vcenter() -> None:
    s = VCenterSlots(1)
    assert s.try_acquire("vc-a")
    s.release("vc-a")
    assert s.held("vc-a") == 0
    assert s.try_acquire("vc-a")


def test_release_without_take_and_bad_cap_raise() -> None:
    s = VCenterSlots(1)
    with pytest.raises(RuntimeError):
        s.release("vc-a")
    with pytest.raises(ValueError):
        VCenterSlots(0)


class Woken:
    """Consumes ``VCenterSlots.requests()`` (the wake channel) into ``seen``."""

    def __init__(self, slots: VCenterSlots) -> None:
        self.slots = slots
        self.seen: list[Request] = []
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Woken:
        async def consume() -> None:
            async for request in self.slots.requests():
                self.seen.append(request)

        self.task = asyncio.create_task(consume())
        await asyncio.sleep(0)  # the channel is registered once the generator starts
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def drain(self) -> list[Request]:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        out, self.seen = self.seen, []
        return out


A, B, C, D = (Request("ns", n) for n in "abcd")


def conn(endpoint: str, provider: str = "ns/vc") -> Connection:
    return Connection(provider=provider, endpoint=endpoint, username="u", password="p")


async def hold_a_then_wake_b(s: VCenterSlots, woken: Woken) -> None:
    """A holds the only slot, B and C wait in that order; A's release wakes B (only)."""
    assert s.try_acquire("vc", A)
    for r in (B, C):
        assert not s.try_acquire("vc", r)
    s.release("vc")
    assert await woken.drain() == [B]


def test_without_the_wake_channel_a_refused_request_does_not_wait() -> None:
    s = VCenterSlots(1)
    assert not s.waking
    assert s.try_acquire("vc", A)
    assert not s.try_acquire("vc", B)
    assert s.waiting("vc") == 0


async def test_a_release_wakes_the_first_waiter_only() -> None:
    s = VCenterSlots(1)
    async with Woken(s) as woken:
        assert s.waking
        assert s.try_acquire("vc", A)
        assert not s.try_acquire("vc", B) and not s.try_acquire("vc", C)
        assert not s.try_acquire("vc", B)  # asking again does not queue twice
        assert s.waiting("vc") == 2
        s.release("vc")
        assert await woken.drain() == [B]
        assert s.try_acquire("vc", B) and s.waiting("vc") == 1
        s.settle(B)
        assert await woken.drain() == []  # B used its token: nothing passed on
        s.release("vc")
        assert await woken.drain() == [C]
    assert not s.waking and s.waiting("vc") == 0


async def test_an_unused_wake_token_passes_to_the_next_waiter() -> None:
    """A woken request whose reconcile never asks for a slot (object gone) must not strand the rest."""
    s = VCenterSlots(1)
    async with Woken(s) as woken:
        await hold_a_then_wake_b(s, woken)
        s.settle(B)  # B's reconcile ended without trying
        assert await woken.drain() == [C]
        assert s.try_acquire("vc", C)


async def test_a_woken_request_that_loses_the_race_stays_first_in_line() -> None:
    s = VCenterSlots(1)
    async with Woken(s) as woken:
        await hold_a_then_wake_b(s, woken)
        assert s.try_acquire("vc", D)  # an event-driven reconcile takes the slot first
        assert not s.try_acquire("vc", B)
        s.settle(B)
        s.release("vc")
        assert await woken.drain() == [B]  # not C


async def test_machines_whose_vm_exists_are_served_before_those_to_clone() -> None:
    """In a 0 -> 1,000 wave, machines cloned and powered on waited behind every machine still to
    be cloned before their status (provisioned, the guest's address) could be written."""
    s = VCenterSlots(1)
    async with Woken(s) as woken:
        assert s.try_acquire("vc", A)
        assert not s.try_acquire("vc", B)  # to clone
        assert not s.try_acquire("vc", C)  # to clone
        assert not s.try_acquire("vc", D, first=True)  # its VM exists
        assert s.waiting("vc") == 3
        s.release("vc")
        assert await woken.drain() == [D]
        assert s.try_acquire("vc", D)
        s.release("vc")
        assert await woken.drain() == [B]
        assert s.try_acquire("vc", B)
        assert not s.try_acquire("vc", C, first=True)  # C's VM appeared while it waited: it changes line
        assert s.waiting("vc") == 1  # not queued twice
        s.release("vc")
        assert await woken.drain() == [C]
    assert s.waiting("vc") == 0


def _machine(spec: dict[str, object] | None = None, status: dict[str, object] | None = None) -> VSphereMachine:
    wire: dict[str, object] = {"metadata": {"name": "m1", "namespace": "ns", "uid": "u1"},
                               "spec": {"template": "ubuntu", "numCPUs": 1, "memoryMiB": 512, **(spec or {})}}
    if status is not None:
        wire["status"] = status
    return VSphereMachine.from_wire(wire)


def test_a_machine_with_a_provider_id_but_a_deferred_status_counts_as_having_its_vm() -> None:
    """After a clone the providerID is written at once while a progress-only status change may
    be deferred (ADR 0011): the 1,000-machine run had 300 such machines, status still Cloning,
    waiting behind every clone to come."""
    assert not vm_exists(_machine())
    assert not vm_exists(_machine(status={"conditions": []}))
    assert vm_exists(_machine(spec={"providerID": "vsphere://a622ac5b-0885-4501-821b-9ec3b7d5a7fe"}))
    assert vm_exists(_machine(status={"instanceUUID": "a622ac5b-0885-4501-821b-9ec3b7d5a7fe"}))


@pytest.mark.parametrize(("endpoint", "key"), [
    ("vc.example.test", "vc.example.test:443"),
    ("vc.example.test:443", "vc.example.test:443"),
    ("https://VC.example.test/sdk", "vc.example.test:443"),
    ("http://127.0.0.1:8989/sdk", "127.0.0.1:8989"),
    ("vc.example.test:8443", "vc.example.test:8443"),
    ("vc:99999", "vc:99999"),  # does not parse: its own key
])
def test_the_key_is_the_backends_host_port_label(endpoint: str, key: str) -> None:
    assert slot_key(VSphereBackend(max_workers=1), conn(endpoint)) == key


def test_a_backend_without_labels_keys_by_the_endpoint_as_written() -> None:
    assert slot_key(object(), conn("https://vc.example.test/sdk")) == "https://vc.example.test/sdk"


def test_providers_naming_one_vcenter_differently_share_its_slots() -> None:
    backend = VSphereBackend(max_workers=1)
    s = VCenterSlots(1)
    assert s.try_acquire(slot_key(backend, conn("vc.example.test", "ns-a/vc")))
    assert not s.try_acquire(slot_key(backend, conn("https://vc.example.test:443/sdk", "ns-b/vc"))), \
        "the same vCenter, spelled otherwise, by another namespace's Provider"
