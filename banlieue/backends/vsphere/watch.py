"""Change notifications from one vCenter: a PropertyCollector long poll (``WaitForUpdatesEx``).

One dedicated collector with one filter (every VM, found by the inventory traversal) per watch.
The long poll runs on its own (daemon) thread and its own SOAP stub (sharing the session cookie), with a
socket timeout above ``max_wait_seconds``, so it never occupies a worker of the vCenter's pool and
the pool's request timeout stays short. Steady state costs one outstanding request per vCenter,
renewed every ``max_wait_seconds`` (default 60 s: 60 requests per hour per vCenter) and
never per VM. The bound is short because a poll to a vCenter that hangs is given up only by its
socket timeout (``max_wait_seconds + 60``, i.e. 120 s, the pool's request timeout): with 600 s a
hung-then-restarted vCenter kept the watch (and the index it keeps authoritative) stale for 11
minutes. Noticing the hang itself is the reachability probe's job (``health``: seconds).

Watched paths: ``runtime.powerState``, ``guest.ipAddress``, ``guest.net``, ``config.instanceUuid``,
``config.uuid`` (the BIOS UUID of providerID), ``config.extraConfig`` (the UID), ``config.template``,
``config.changeVersion`` and ``name`` (with the power state, what ``VMIndex.observe`` needs to
tell whether the last full read of a VM still holds). Objects leaving the filter ("leave") are
removals. After a re-login the collector is recreated and the first batch (every managed VM,
"modified") is a resync: nothing missed while the session was gone is lost.

VMs the collector never reported. A PropertyCollector reports differences between the versions
it hands out: an object that exists in none of them is never reported, neither as "enter" nor as
"leave" (vSphere Web Services API, ``WaitForUpdatesEx``). vcsim computes those versions
lazily: it re-runs the filter's traversal on its tick (20 ms in govmomi 0.56) while a long poll
is outstanding, so a VM cloned and destroyed within one tick is invisible (0.24 also collected
the first batch before subscribing to changes, losing a VM created in between; 0.56 subscribes
first). Real vCenter has the same gap at version granularity. So the watch does not rely
on the collector for the VMs banlieue knows (the shared ``VMIndex``: clones, scans): an indexed
VM the collector has not reported ``PENDING_CHECK_SECONDS`` (3 s) after the index learned it is
read directly (one ``RetrievePropertiesEx`` for all such VMs); a missing one yields "removed".
One still unreported after ``RESYNC_AFTER_CHECKS`` reads makes the watch resync (a new collector,
whose first batch lists every VM, as after a re-login), and one still
unreported after ``GIVE_UP_AFTER_CHECKS`` (outside the traversal, e.g. inside a vApp) is no
longer checked. No timer runs and no request is sent while every indexed VM has been reported:
on a healthy vCenter the collector reports a clone within its long poll, so creating a VM costs
no extra request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import Executor, Future
from typing import Any

import structlog
from pyVmomi import SoapAdapter as _soap
from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import BackendError, TLSVerifyFailed, VMChange
from banlieue.backends.vsphere import deserializer
from banlieue.backends.vsphere.faults import map_exception
from banlieue.backends.vsphere.find import UID_KEY, VMIndex
from banlieue.backends.vsphere.properties import PC, moid, retrieve_present, vm_traversal
from banlieue.backends.vsphere.session import Session, ssl_context

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl
SoapStubAdapter: Any = _soap.SoapStubAdapter

log = structlog.get_logger("banlieue.backends.vsphere.watch")

WATCH_PATHS = [
    "runtime.powerState",
    "guest.ipAddress",
    "guest.net",
    "config.instanceUuid",
    "config.uuid",
    "config.extraConfig",
    "config.template",
    "config.changeVersion",
    "name",
]

PENDING_CHECK_SECONDS = 3.0
"""Seconds the collector gets to report a VM the index learned (a clone) before it is read."""
RESYNC_AFTER_CHECKS = 3
"""Reads finding an indexed VM present but unreported before the watch resyncs (new collector)."""
GIVE_UP_AFTER_CHECKS = 10
"""Reads after which an indexed VM the collector never reports is no longer checked."""
POLL_GAP_SECONDS = 1.0
"""Seconds from sending one long poll to sending the next when the first came back with updates,
at first and whenever a caller waits on the watch (``find.VMIndex.hurry``: a clone's name, or a
power-on waited for in its reconcile, each holding a worker and a vCenter slot meanwhile; a
VSphereMachine's power-on is followed in the background and does not hurry the watch,
``reconcilers.vspheremachine.power_ons``): in a wave of clones the collector has
something new at nearly every tick, and a poll per batch cost about one WaitForUpdatesEx per
machine (issue 22). 2 s was tried: 0.69-0.77 long polls per machine instead of about 1.1 in a
wave of 5 s clones, but each waiter held its slot longer, and 10 machines waiting out a vCenter
outage were all Ready 15 s after it came back instead of 9-10 s (tests/chaos/test_vcenter_faults.py
allows 15). Tried again once power-ons no longer hurried the watch (2026-12-05): the same scenario
failed 2 runs of 3 (5 machines not Ready after 15 s), while 1 s with background power-ons gave
0.58 long polls per machine at 100. The changes of the gap come in the next poll's batch, so a change is reported at most
this much later; the power-on signal (``tasks.SIGNAL_FALLBACK``, 3 s) and the pending check
(``PENDING_CHECK_SECONDS``, 3 s) stay above it."""
POLL_GAP_MAX_SECONDS = 4.0
"""Longest gap (seconds) between two long polls that came back with updates while nobody waits
on the watch: the gap doubles from ``POLL_GAP_SECONDS`` with each poll that brings updates. A
slow wave (1,000 machines at 5 s clones, 26 minutes) paid a poll per second, 1.36 per machine
(issue 22); what is not waited for (a guest's address, a status to write, the index kept
current) is reported up to 4 s later instead of 1 s. Below the health probe's 5 s
(``health.PROBE_INTERVAL``), so a busy watch still keeps the probe out of a wave."""
RETRY_MAX_SECONDS = 5.0
"""Longest pause between two long polls of an unreachable vCenter: one TCP connection attempt
per 5 s costs nothing, and the first answer tells the reconcilers the vCenter is back
(``session`` reconnect listeners); a 60 s cap delayed that by up to a minute."""


def existing_vms(content: Any, vms: Iterable[Any]) -> set[str]:
    """Morefs of ``vms`` that still exist: one RetrievePropertiesEx (+ continuations).

    ``reportMissingObjectsInResults`` keeps one missing VM from failing the whole call: vcsim
    leaves it out, vCenter returns it with a ManagedObjectNotFound in ``missingSet``. Raises
    vim.fault.NotAuthenticated (vcsim reports an expired session per property) so that
    ``Session.call`` logs in again.
    """
    return {moid(o.obj) for o in retrieve_present(content, vms, vim.VirtualMachine, ["name"])}


class VMWatch:
    """The blocking half of a watch: collector setup, one long poll, the pending-VM check,
    teardown. ``poll`` runs on the watch's own thread, ``check_pending`` and ``cancel`` in the
    vCenter's pool; ``known`` and the check counters are shared under ``_lock``."""

    def __init__(self, session: Session, max_wait_seconds: float, index: VMIndex) -> None:
        self.session = session
        self.index = index
        self.max_wait = max_wait_seconds
        self.stub: Any = None
        self.collector: Any = None
        self.version = ""
        self._lock = threading.Lock()
        # moref -> (uid, instance uuid) of every VM the current collector has reported.
        self.known: dict[str, tuple[str | None, str | None]] = {}
        self._synced = False  # the current collector's first batch has been applied
        self._resync = False  # replace the collector at the next poll (full state again)
        self._checks: dict[str, int] = {}  # moref -> reads that found it present but unreported
        self._ignored: set[str] = set()
        self.updated = False
        """Whether the last ``poll`` came back with an update set (``POLL_GAP_SECONDS``)."""

    def _make_stub(self) -> Any:
        s = self.session
        url = f"{s.protocol}://{s.host}:{s.port}/sdk"
        stub = SoapStubAdapter(
            url=url,
            version=s.stub.version,
            sslContext=ssl_context(s.conn) if s.protocol == "https" else None,
            httpConnectionTimeout=self.max_wait + 60,
            connectionPoolTimeout=-1,
            poolSize=1,
        )
        s.endpoint.instrument(stub, s.conn.provider, lambda: s.released)
        # The long poll's answers are read lean and streamed (deserializer/updateset modules):
        # a first batch of every VM as pyVmomi objects was the manager's memory peak.
        setattr(stub, deserializer.LEAN_UPDATE_SETS, UID_KEY)
        return stub

    def setup(self) -> None:
        """Create the collector and its filter on the current session (3 SOAP calls)."""
        if self.stub is None:
            self.stub = self._make_stub()
            self.session.extra_stubs.add(self.stub)  # closed by the certificate check
        self.stub.SetSessionId(self.session.stub.GetSessionId())
        root_pc = vmodl.query.PropertyCollector(moid(self.session.content.propertyCollector), self.stub)
        collector = root_pc.CreatePropertyCollector()
        root = vim.Folder(moid(self.session.content.rootFolder), self.stub)
        spec = PC.FilterSpec(
            objectSet=[PC.ObjectSpec(obj=root, skip=False, selectSet=vm_traversal())],
            propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=WATCH_PATHS)],
        )
        collector.CreateFilter(spec, partialUpdates=False)
        self.index.reset_reads()  # what changed while no collector listened was not seen
        with self._lock:
            # A new collector reports everything again: what the old one reported means nothing.
            self.known.clear()
            self._synced = False
            self._resync = False
        self.collector = collector
        self.version = ""

    def poll(self) -> list[VMChange]:
        """One WaitForUpdatesEx (blocks up to max_wait seconds); re-login on NotAuthenticated.
        Raises TLSVerifyFailed, sending nothing, while the session's certificate check fails."""
        self.updated = False
        if self.session.tls_error is not None:
            raise TLSVerifyFailed(self.session.tls_error)
        try:
            with self._lock:
                resync, self._resync = self._resync, False
            if resync and self.collector is not None:
                # A new collector reports the full state on vcsim and vCenter alike (version ""
                # on the same collector would not on vcsim: it only adds objects it never had).
                _destroy(self.collector)
                self.collector = None
            if self.collector is None:
                self.setup()
            update = self.collector.WaitForUpdatesEx(self.version, PC.WaitOptions(maxWaitSeconds=int(self.max_wait)))
        except vmodl.fault.RequestCanceled:
            return []  # check_pending asked for a resync (or the watch is stopping)
        except (vim.fault.NotAuthenticated, vmodl.fault.ManagedObjectNotFound):
            self.index.authoritative = False
            # The session ended (or the collector went with it): share the pool's session,
            # logging in again if that one is the dead one too, then resync.
            if self.stub.GetSessionId() == self.session.stub.GetSessionId():
                self.session.relogin(self.session.generation)
            self.collector = None
            return []
        except Exception as exc:
            raise map_exception(exc) from exc
        if update is None:
            return []
        self.updated = True
        full = self.version == ""
        self.version = update.version
        changes = self._changes(update)
        # Update the index here, as the batch arrives, not when the consumer gets to it.
        for change in changes:
            if change.uid is None:
                continue
            if change.kind == "removed":
                self.index.forget(change.uid, change.moref)
            else:
                self.index.put(change.uid, vim.VirtualMachine(change.moref, self.session.stub), replace=False)
        if full:
            with self._lock:
                self._synced = True
            self.index.authoritative = True
        return changes

    def _changes(self, update: Any) -> list[VMChange]:
        out: list[VMChange] = []
        label = self.session.endpoint.label
        with self._lock:
            for fs in update.filterSet or []:
                for oc in fs.objectSet or []:
                    ref = moid(oc.obj)
                    if oc.kind == "leave":
                        self.index.observe(ref, {}, removed=True)
                        uid, iu = self.known.pop(ref, (None, None))
                        uid = uid or self.index.uid_of(ref)
                        if uid is not None:
                            out.append(VMChange(label, ref, uid, iu, "removed"))
                        continue
                    self.index.observe(ref, {c.name: c.val for c in oc.changeSet or []})
                    uid, iu = self.known.get(ref, (None, None))
                    template = False
                    for change in oc.changeSet or []:
                        if change.name == "config.extraConfig":
                            uid = next((str(o.value) for o in change.val or [] if o.key == UID_KEY), None)
                        elif change.name == "config.instanceUuid":
                            iu = str(change.val) if change.val else None
                        elif change.name == "config.template":
                            template = bool(change.val)
                    # vcsim may list a VM before its config exists and never reports the
                    # extraConfig written later: the index knows the UID of what banlieue cloned.
                    uid = uid or self.index.uid_of(ref)
                    self.known[ref] = (uid, iu)
                    self._checks.pop(ref, None)
                    if uid is not None and not template:
                        out.append(VMChange(label, ref, uid, iu, "modified"))
        return out

    def pending(self) -> dict[str, str]:
        """moref -> UID of indexed VMs the collector has not reported (empty until its first
        batch is applied: before that, the first batch itself will list every existing VM)."""
        with self._lock:
            if not self._synced:
                return {}
            return {
                ref: uid
                for ref, uid in self.index.morefs().items()
                if ref not in self.known and ref not in self._ignored
            }

    def check_pending(self, s: Session) -> list[VMChange]:
        """Read the pending VMs (1 call, none when nothing is pending): "removed" for each one
        that no longer exists; count the present ones (resync, then give up: module docstring)."""
        pending = self.pending()
        if not pending:
            return []
        present = existing_vms(s.content, [vim.VirtualMachine(ref, s.stub) for ref in pending])
        out: list[VMChange] = []
        resync = False
        with self._lock:
            for ref, uid in pending.items():
                if ref in self.known:
                    continue  # reported while we were reading
                if ref not in present:
                    self._checks.pop(ref, None)
                    if self.index.forget(uid, ref):
                        out.append(VMChange(self.session.endpoint.label, ref, uid, None, "removed"))
                    continue
                n = self._checks[ref] = self._checks.get(ref, 0) + 1
                if n >= GIVE_UP_AFTER_CHECKS:
                    self._ignored.add(ref)
                    self._checks.pop(ref, None)
                    log.warning("vsphere watch never reported a VM; no longer checking it",
                                vcenter=self.session.endpoint.label, vm=ref)
                elif n % RESYNC_AFTER_CHECKS == 0:
                    resync = True
            if resync:
                self._resync = True
            collector = self.collector
        if resync and collector is not None:
            log.info("vsphere watch has not reported a known VM; resyncing",
                     vcenter=self.session.endpoint.label)
            # End the outstanding long poll so the next poll resyncs. A cancel that
            # arrives between two polls is lost: the next count multiple asks again.
            with contextlib.suppress(Exception):
                vmodl.query.PropertyCollector(moid(collector), s.stub).CancelWaitForUpdates()
        return out

    def cancel(self) -> None:
        """Unblock a pending long poll (CancelWaitForUpdates) and destroy the collector."""
        collector, self.collector = self.collector, None
        if collector is not None:
            _destroy(vmodl.query.PropertyCollector(moid(collector), self.session.stub))


def _destroy(collector: Any) -> None:
    """Best effort: CancelWaitForUpdates and DestroyPropertyCollector (the session may be gone)."""
    with contextlib.suppress(Exception):
        collector.CancelWaitForUpdates()
        collector.DestroyPropertyCollector()


class DaemonExecutor(Executor):
    """Runs each submitted call on a new daemon thread named ``name``.

    The long poll blocks in a socket read for up to ``max_wait_seconds`` (600 s). A
    ``ThreadPoolExecutor``'s threads are joined when the interpreter exits, so a poll that the
    shutdown's ``CancelWaitForUpdates`` could not end (the session already gone, the vCenter
    unreachable) kept a stopped manager alive until the poll returned. A daemon thread does not
    hold the exit; what it was doing is abandoned with the process, which is all a long poll is.
    One thread per poll: polls are sequential and at most one per batch of changes.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._shutdown = False

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[Any] = Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting side, as ThreadPoolExecutor does
                future.set_exception(exc)

        threading.Thread(target=run, name=self.name, daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._shutdown = True


def next_gap(gap: float, updated: bool, low: float, high: float) -> float:
    """The gap (seconds) after a poll that used ``gap``: doubled up to ``high`` when the poll
    came back with updates (``updated``), back to ``low`` when it came back empty (quiet for its
    ``max_wait``, or cancelled). Never below ``low`` (``POLL_GAP_SECONDS`` / ``POLL_GAP_MAX_SECONDS``)."""
    if not updated:
        return low
    return max(low, min(gap * 2, high))


def hurried_poll(next_poll: float, sent: float, now: float, low: float) -> float:
    """When the next long poll goes out once a caller waits on the watch (``VMIndex.hurry``):
    ``low`` seconds after the last one was sent (``sent``), at once if that is past, and never
    later than it was due anyway (``next_poll``). Monotonic seconds."""
    return min(next_poll, max(now, sent + low))


async def watch_vms(session: Session, index: VMIndex, max_wait_seconds: float,
                    poll_gap: float = POLL_GAP_SECONDS,
                    poll_gap_max: float = POLL_GAP_MAX_SECONDS) -> AsyncIterator[VMChange]:
    """Yield VMChange for banlieue-managed VMs until the consumer stops (see module docstring).

    Transient errors (vCenter unreachable) are retried with back-off (1 s doubling to
    ``RETRY_MAX_SECONDS``: these retries are how a vCenter that comes back is noticed);
    other BackendErrors end the iteration by raising. A VM put in ``index`` (a clone) that the
    collector does not report within ``PENDING_CHECK_SECONDS`` is read directly, and its
    removal is reported even if the collector never saw it. ``poll_gap``: seconds from one long
    poll that came back with updates to the next, at first and while a caller waits on the watch
    (``POLL_GAP_SECONDS``); the gap doubles with each poll that brings updates up to
    ``poll_gap_max`` (``POLL_GAP_MAX_SECONDS``; ``next_gap``, ``hurried_poll``).
    """
    w = VMWatch(session, max_wait_seconds, index)
    thread = DaemonExecutor(f"vsphere-watch-{session.endpoint.label}")
    loop = asyncio.get_running_loop()
    indexed = asyncio.Event()  # the index learned a new moref (maybe one to check), or a hurry
    hurried = False  # a caller waits on the next batch (``VMIndex.hurry``)

    def on_indexed() -> None:  # called from any thread
        loop.call_soon_threadsafe(indexed.set)

    def on_hurry() -> None:  # called from any thread
        def flag() -> None:
            nonlocal hurried
            hurried = True
            indexed.set()

        loop.call_soon_threadsafe(flag)

    unsubscribe = index.subscribe(on_indexed)
    unhurry = index.on_hurry(on_hurry)
    poll: asyncio.Future[list[VMChange]] | None = None
    woken: asyncio.Future[Any] | None = None
    check_at: float | None = None
    backoff = 1.0
    sent = next_poll = loop.time()  # the last long poll's send time; no new one before next_poll
    gap = poll_gap  # the gap after the next poll that brings updates (``next_gap``)
    try:
        while True:
            if hurried and poll is None:
                # (A hurry while a poll is out waits for its answer: that batch may not hold
                # what the caller waits for, so the poll after it is not put off either.)
                hurried = False
                next_poll = hurried_poll(next_poll, sent, loop.time(), poll_gap)
            if poll is None and loop.time() >= next_poll:
                poll = loop.run_in_executor(thread, w.poll)
                sent = loop.time()
            if woken is None:
                woken = asyncio.ensure_future(indexed.wait())
            if check_at is None and w.pending():
                check_at = loop.time() + PENDING_CHECK_SECONDS
            wakes = [t for t in (check_at, next_poll if poll is None else None) if t is not None]
            timeout = max(0.0, min(wakes) - loop.time()) if wakes else None
            waiting: set[asyncio.Future[Any]] = {woken} if poll is None else {poll, woken}
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if woken in done:
                indexed.clear()
                woken = None
            if check_at is not None and loop.time() >= check_at:
                check_at = None
                try:
                    removed = await loop.run_in_executor(session.endpoint.pool, session.call, w.check_pending)
                except BackendError as exc:  # retried at the next check
                    log.warning("vsphere watch could not read pending VMs", vcenter=session.endpoint.label,
                                reason=exc.reason)
                    removed = []
                for change in removed:
                    yield change
            if poll is None or not poll.done():
                continue
            finished, poll = poll, None
            try:
                changes = finished.result()
                backoff = 1.0
                if w.updated:
                    next_poll = sent + gap
                gap = next_gap(gap, w.updated, poll_gap, max(poll_gap, poll_gap_max))
            except Exception as exc:
                err = map_exception(exc)
                if err.reason not in ("ConnectFailed", "Timeout", "Transient", "RequestCanceled"):
                    raise err from exc
                log.warning("vsphere watch failed; retrying", vcenter=session.endpoint.label, reason=err.reason)
                w.collector = None
                index.authoritative = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_SECONDS)
                continue
            for change in changes:
                yield change
    finally:
        unsubscribe()
        unhurry()
        if woken is not None:
            woken.cancel()
        if poll is not None:
            poll.cancel()  # the thread's call ends with the collector below; drop its result
        index.authoritative = False
        await loop.run_in_executor(session.endpoint.pool, w.cancel)
        thread.shutdown(wait=False, cancel_futures=True)
