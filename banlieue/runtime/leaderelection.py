"""Leader election on a coordination.k8s.io/v1 Lease (client-go ``tools/leaderelection``).

Mechanics (runtime-facts §3.7): acquire by retrying every RetryPeriod with jitter factor 1.2;
while leading, renew every RetryPeriod, each renewal bounded by RenewDeadline (missing it =
leadership lost); every write carries the resourceVersion last read, so a Conflict means
another candidate won the race. A foreign lease counts as held until ``leaseDurationSeconds``
after the *local* time at which its record was last seen to change (clock skew safe).
The leader first tries the optimistic fast path (update its own last-read object) and falls
back to GET-and-compare. Release (ReleaseOnCancel) writes holderIdentity "" with
leaseDurationSeconds 1. Defaults 15 s / 10 s / 2 s (controller-runtime).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError, Conflict, NotFound
from banlieue.runtime.kinds import LEASE
from banlieue.runtime.metrics import LEADER_ELECTION_MASTER_STATUS

log = structlog.get_logger("banlieue.runtime.leaderelection")
JITTER_FACTOR = 1.2


def _micro_time(ts: float) -> str:
    """metav1.MicroTime wire format: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Campaigns for ``namespace/lease_name`` as ``identity``.

    ``leading`` is an ``asyncio.Event`` set while this candidate leads; ``on_started_leading``
    / ``on_stopped_leading`` are optional callbacks. ``run()`` returns when leadership is lost
    (renew deadline missed) and never returns before leading unless cancelled. On cancellation
    a leader with ``release_on_cancel`` releases the lease. Durations in seconds; raises
    ValueError unless lease_duration > renew_deadline > 1.2 * retry_period > 0.
    Sets ``leader_election_master_status{name=<lease_name>}`` (1 leader, 0 backup).

    ``lease_valid()`` is the fencing check for work done as leader: True only while the last
    successful acquire/renew *started* less than ``renew_deadline`` ago (monotonic clock). A
    leader that was paused (SIGSTOP, a stalled VM) learns it may have lost the Lease from its own
    clock at once, before the renew loop runs again; followers wait ``lease_duration`` (longer)
    after the record last changed, so the leader stops first.
    """

    def __init__(
        self,
        client: Client,
        *,
        lease_name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        release_on_cancel: bool = True,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        if not (lease_duration > renew_deadline > JITTER_FACTOR * retry_period > 0):
            raise ValueError("need lease_duration > renew_deadline > 1.2 * retry_period > 0")
        self.client = client
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.release_on_cancel = release_on_cancel
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.leading = asyncio.Event()
        self._renewed_at = float("-inf")  # monotonic start of the last successful acquire/renew
        self.request_timeout = max(renew_deadline / 2, 1.0)  # controller-runtime's LE client timeout
        self._lease: dict[str, Any] | None = None  # last object read or written
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._log = log.bind(lease=f"{namespace}/{lease_name}", identity=identity)

    def is_leader(self) -> bool:
        return self.leading.is_set()

    def lease_valid(self) -> bool:
        """Leading, and the last successful renewal started less than ``renew_deadline`` s ago."""
        return self.leading.is_set() and time.monotonic() - self._renewed_at < self.renew_deadline

    @property
    def observed_holder(self) -> str:
        """holderIdentity from the last record read ("" when none)."""
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def _set_gauge(self, value: int) -> None:
        LEADER_ELECTION_MASTER_STATUS.labels(name=self.lease_name).set(value)

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = dict(lease.get("spec") or {})
        if spec != self._observed_spec:
            self._observed_spec = spec
            self._observed_at = time.monotonic()
        self._lease = lease

    def _record(self, now: float, previous: dict[str, Any]) -> dict[str, Any]:
        ours = previous.get("holderIdentity") == self.identity
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": previous.get("acquireTime") if ours and previous.get("acquireTime") else _micro_time(now),
            "renewTime": _micro_time(now),
            # The Lease field is leaseTransitions (coordination.k8s.io/v1 LeaseSpec); client-go's
            # LeaderElectionRecord calls it LeaderTransitions, but a Lease has no such field:
            # kube-apiserver drops it, so the count was never kept on a real cluster.
            "leaseTransitions": int(previous.get("leaseTransitions") or 0) + (0 if ours else 1),
        }

    async def _put(self, lease: dict[str, Any]) -> dict[str, Any]:
        path = LEASE.path(self.namespace, self.lease_name)
        return await self.client.request("PUT", path, body=lease, timeout=self.request_timeout)

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go tryAcquireOrRenew). True when we hold the lease afterwards."""
        started = time.monotonic()
        held = await self._try_acquire_or_renew()
        if held:
            self._renewed_at = started
        return held

    async def _try_acquire_or_renew(self) -> bool:
        now = time.time()
        if self.is_leader() and self._lease is not None and self.observed_holder == self.identity:
            # Fast path: update our own last-read object; its resourceVersion guards it. Only
            # while the last record we saw names us (client-go IsLeader reads the observed record).
            lease = {**self._lease, "spec": self._record(now, self._lease.get("spec") or {})}
            try:
                self._observe(await self._put(lease))
                return True
            except ApiError as exc:
                self._log.debug("fast-path renew failed, falling back to GET", error=str(exc))
        path = LEASE.path(self.namespace, self.lease_name)
        try:
            current = await self.client.request("GET", path, timeout=self.request_timeout)
        except NotFound:
            body = {
                "apiVersion": LEASE.api_version, "kind": LEASE.kind,
                "metadata": {"name": self.lease_name, "namespace": self.namespace},
                "spec": self._record(now, {}),
            }
            try:
                self._observe(await self.client.request("POST", LEASE.path(self.namespace), body=body, timeout=self.request_timeout))
                return True
            except ApiError as exc:  # AlreadyExists: another candidate created it first
                self._log.debug("lease create failed", error=str(exc))
                return False
        self._observe(current)
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or 0)
        if holder and holder != self.identity and time.monotonic() < self._observed_at + duration:
            return False  # held by someone else and not expired (by our clock)
        try:
            self._observe(await self._put({**current, "spec": self._record(now, spec)}))
            return True
        except Conflict:
            return False  # lost the race: someone wrote since our read

    async def _acquire(self) -> None:
        while True:
            try:
                if await self.try_acquire_or_renew():
                    return
            except ApiError as exc:
                self._log.info("acquire attempt failed", error=str(exc))
            await asyncio.sleep(self.retry_period * (1 + random.random() * JITTER_FACTOR))

    async def _renew_once(self) -> bool:
        """Retry every retry_period until renewed or renew_deadline passes (client-go renew)."""
        try:
            async with asyncio.timeout(self.renew_deadline):
                while True:
                    try:
                        if await self.try_acquire_or_renew():
                            return True
                    except ApiError as exc:
                        self._log.info("renew attempt failed", error=str(exc))
                    await asyncio.sleep(self.retry_period)
        except TimeoutError:
            return False

    async def run(self) -> None:
        """Acquire, lead while renewals succeed, return when leadership is lost."""
        self._set_gauge(0)
        try:
            await self._acquire()
            self.leading.set()
            self._set_gauge(1)
            self._log.info("became leader")
            if self.on_started_leading:
                self.on_started_leading()
            while True:
                await asyncio.sleep(self.retry_period)
                if not await self._renew_once():
                    self._log.warning("leadership lost: renew deadline passed")
                    return
        except asyncio.CancelledError:
            if self.is_leader() and self.release_on_cancel:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(self.release())
            raise
        finally:
            was_leader = self.is_leader()
            self.leading.clear()
            self._set_gauge(0)
            if was_leader and self.on_stopped_leading:
                self.on_stopped_leading()

    async def release(self) -> bool:
        """Give the lease up (holderIdentity "", leaseDurationSeconds 1) if we hold it, bounded
        by renew_deadline. True when released."""
        if self._lease is None or (self._lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return False
        now = _micro_time(time.time())
        spec = {**(self._lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1,
                "renewTime": now, "acquireTime": now}
        try:
            async with asyncio.timeout(self.renew_deadline):
                self._observe(await self._put({**self._lease, "spec": spec}))
        except (ApiError, TimeoutError) as exc:
            self._log.warning("lease release failed", error=str(exc))
            return False
        self._log.info("released lease")
        return True
