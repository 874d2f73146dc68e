"""Waiting for vSphere tasks without holding a thread: poll ``info`` with back-off from asyncio.

Each poll is one RetrievePropertiesEx on the task (state, error, result); the first poll is
immediate (short tasks are often done by then), then 0.1 s doubling to 2 s.
A task ``wait_task`` saw end is remembered (``ENDED_KEPT`` most recent, by vCenter ``host:port``
and task moref): ``in_flight`` does not read it again (a task that ended never runs again), so a
VM's deletion reads only its recentTask for the tasks this process followed (issue 22).
A task that has not finished within ``timeout`` seconds (``--vsphere-task-timeout``, default
600 s) raises TaskFailed(reason="TaskTimeout"); the task itself keeps running in vCenter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import BackendError, TaskFailed, Transient
from banlieue.backends.vsphere import metrics
from banlieue.backends.vsphere.faults import task_error
from banlieue.backends.vsphere.properties import (
    ObjectProps,
    moid,
    retrieve_objects,
    retrieve_present,
    retrieve_with,
)
from banlieue.backends.vsphere.session import Session

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl

T = TypeVar("T")

ENDED_KEPT = 10_000
"""How many ended tasks are remembered (about 100 bytes each; vCenter keeps a VM's recent tasks
for minutes, and a process following more tasks than this reads the oldest again)."""
_ended: OrderedDict[tuple[str, str], None] = OrderedDict()
_ended_lock = threading.Lock()  # wait_task records on the event loop, in_flight reads in a pool thread


def _task_key(task: Any) -> tuple[str, str] | None:
    """(``host:port`` of the vCenter the task object is bound to, task moref), None when unbound."""
    host = getattr(getattr(task, "_stub", None), "host", None)
    return (str(host), str(task._moId)) if host else None


def _saw_end(task: Any) -> None:
    key = _task_key(task)
    if key is None:
        return
    with _ended_lock:
        _ended[key] = None
        _ended.move_to_end(key)
        while len(_ended) > ENDED_KEPT:
            _ended.popitem(last=False)


def seen_ended(task: Any) -> bool:
    """Whether ``wait_task`` saw ``task`` end (success or error) in this process."""
    key = _task_key(task)
    with _ended_lock:
        return key is not None and key in _ended


def forget_ended(label: str) -> None:
    """Forget the ended tasks of vCenter ``label`` (``host:port``): called when it answers again
    after an outage, since a restarted vCenter (vcsim) numbers its tasks anew."""
    with _ended_lock:
        for key in [k for k in _ended if k[0] == label]:
            del _ended[key]


class Runner(Protocol):
    """Runs a blocking ``fn(session)`` in the vCenter's pool (SessionPool.run bound to a Connection)."""

    def __call__(self, fn: Callable[[Session], T]) -> Awaitable[T]: ...


TASK_PATHS = ["info.state", "info.error", "info.result"]


def _task_info(task: Any) -> Callable[[Session], ObjectProps]:
    def read(s: Session) -> ObjectProps:
        return retrieve_objects(s.content, [task], vim.Task, TASK_PATHS)[0]

    return read


@dataclass
class ReadAlong:
    """An object read in the same RetrievePropertiesEx as each poll of a task (issue 22: the read
    after a clone rides on the clone task's last poll instead of costing a request of its own).

    ``target()`` gives the object to read with the next poll, or None (then the task alone is
    read, as without a ReadAlong); ``mark()`` is called just before each poll that reads it
    (``find.VMIndex.mark``). When a poll sees the task succeed with the object read beside it,
    ``props`` is that read and ``since`` the mark taken before it; else ``props`` stays None.
    Nothing orders the two reads (``properties.retrieve_with``): on vCenter the object may have
    been read before the task ended, so the caller checks that the read shows the task's effect
    before it uses it.

    ``known``: set (by the caller's change watch) once ``target()`` can give the object; a poll
    that would read the task alone waits for it first, ``grace`` seconds at most in all (a clone
    on vcsim ends in a fraction of a second, before the watch's next batch names it). ``hurry()``
    is called when a poll starts waiting for it (``find.VMIndex.hurry``: the watch's next batch
    comes within its shortest gap, not its grown one)."""

    target: Callable[[], Any | None]
    type_: Any
    paths: list[str]
    mark: Callable[[], int] = field(default=lambda: 0)
    known: asyncio.Event | None = None
    grace: float = 0.0
    hurry: Callable[[], None] = field(default=lambda: None)
    props: ObjectProps | None = None
    since: int = 0

    async def wait_known(self) -> None:
        """Wait for ``known`` (if ``target()`` gives nothing yet), within what is left of ``grace``."""
        if self.known is None or self.grace <= 0 or self.target() is not None:
            return
        start = time.monotonic()
        self.hurry()
        await _signalled(self.known, self.grace)
        self.grace -= time.monotonic() - start


def _task_and(task: Any, along: ReadAlong, obj: Any) -> Callable[[Session], tuple[ObjectProps, ObjectProps | None]]:
    """One poll of ``task`` reading ``obj`` (``along``'s type and paths) in the same call. A task
    left out of the answer (vCenter forgot it) is read alone, which raises as a poll without a
    ReadAlong does; ``obj`` gone meanwhile gives None beside the task (the task read alone again
    if the collector fails the call for it)."""
    def read(s: Session) -> tuple[ObjectProps, ObjectProps | None]:
        try:
            got = retrieve_with(s.content, [(task, vim.Task, TASK_PATHS), (obj, along.type_, along.paths)])
        except vmodl.fault.ManagedObjectNotFound:
            # A collector that fails the whole call for the object gone (instead of leaving it
            # out): the task alone, as without a ReadAlong.
            return _task_info(task)(s), None
        task_ref, obj_ref = moid(task), moid(obj)
        info = next((o for o in got if o.type == "Task" and o.moref == task_ref), None)
        if info is None:
            return _task_info(task)(s), None
        other = next((o for o in got if o.type != "Task" and o.moref == obj_ref), None)
        return info, other

    return read


SIGNAL_FALLBACK = 3.0
"""Seconds ``wait_task`` waits for its ``signal`` before it polls the task (and between polls
at first). A change watch reports a power state within its hurried poll gap
(``watch.POLL_GAP_SECONDS``, 1 s) plus the collector's tick, with room for a lagging poll; below that, a signal on its way is
overtaken by a task read (issue 22: vCenter requests per machine). A caller that does not hurry
the watch (a power-on followed in the background) passes its own ``signal_fallback``."""


ALONG_POLL_DELAY = 1.0
"""Seconds between the first two polls of a task read with an object along (``ReadAlong``, a
clone), doubling (``next_poll_delay``); other tasks start at 0.1 s."""

POLL_DELAY_MAX = 2.0
"""Seconds between two polls of a task that has run less than ``POLL_DELAY_MAX / POLL_SHARE``
(20 s)."""

POLL_SHARE = 0.1
"""Share of the time a task has run so far that the next poll may wait, once that is above
``POLL_DELAY_MAX``. A full clone on a real vCenter runs minutes, not a simulator's seconds: polled
every 2 s, a 3-minute clone cost 87 task reads (issue 22's floor is 4 vCenter requests per
machine); with a gap of a tenth of its age it costs 30, seen done at most a tenth of its
duration late. The watch does not report tasks, so a poll is how their end is seen."""


def next_poll_delay(delay: float, elapsed: float) -> float:
    """Seconds before the poll after one that waited ``delay`` seconds, for a task that has run
    ``elapsed`` seconds: double ``delay``, at most ``max(POLL_DELAY_MAX, POLL_SHARE * elapsed)``."""
    return min(delay * 2, max(POLL_DELAY_MAX, POLL_SHARE * elapsed))


async def wait_task(run: Runner, task: Any, what: str, timeout: float, provider: str,
                    signal: asyncio.Event | None = None, first_poll: float = 0.0,
                    along: ReadAlong | None = None, signal_fallback: float = SIGNAL_FALLBACK) -> Any:
    """Wait for ``task``; return ``info.result``. Raises TaskFailed (fault message) or on timeout.
    ``provider`` (``namespace/name``) labels the tasks-in-flight gauge. ``signal``: set when the
    change watch has seen the state the task leads to (a power state: issue 22, no task polls);
    then None is returned without polling. Without it for ``signal_fallback`` seconds
    (``SIGNAL_FALLBACK`` by default; a watch that lags or restarts), the task is polled as without
    one, and the signal still ends it.
    ``first_poll``: seconds before the first poll (when the task is expected to be done; 0: at once).
    ``along``: an object read with each poll (``ReadAlong``; its ``props`` set by the poll that
    saw the task succeed)."""
    gauge = metrics.TASKS_IN_FLIGHT.labels(provider)
    gauge.inc()
    try:
        started = time.monotonic()
        deadline = started + timeout
        # A poll that reads an object along (a clone) has already waited for the watch to name
        # it (``ReadAlong.wait_known``); a task still running then is a slow one, polled from
        # ALONG_POLL_DELAY instead of 0.1 s (issue 22: a 5 s clone of a vCenter with no clone
        # duration measured yet took 6 polls, 3 now).
        delay = 0.1 if along is None else ALONG_POLL_DELAY
        if signal is not None:
            if await _signalled(signal, signal_fallback):
                return None
            delay = min(signal_fallback, SIGNAL_FALLBACK)
        elif first_poll > 0:
            await asyncio.sleep(min(first_poll, timeout))
        while True:
            if along is not None:
                await along.wait_known()
            obj = along.target() if along is not None else None
            if along is not None and obj is not None:
                since = along.mark()
                info, beside = await run(_task_and(task, along, obj))
            else:
                info, beside = await run(_task_info(task)), None
            state = info.get("info.state")
            if state in ("success", "error"):
                _saw_end(task)
            if state == "success":
                if along is not None and beside is not None:
                    along.props, along.since = beside, since
                return info.get("info.result")
            if state == "error":
                raise task_error(info.get("info.error"), what)
            if time.monotonic() >= deadline:
                raise TaskFailed(f"{what}: not finished after {timeout:.0f} s", reason="TaskTimeout")
            pause = min(delay, max(deadline - time.monotonic(), 0))
            if signal is not None:
                if await _signalled(signal, pause):
                    return None
            else:
                await asyncio.sleep(pause)
            delay = next_poll_delay(delay, time.monotonic() - started)
    finally:
        gauge.dec()


async def _signalled(signal: asyncio.Event, seconds: float) -> bool:
    """Whether ``signal`` is set within ``seconds``."""
    try:
        await asyncio.wait_for(signal.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True


DESTROY_TASKS = frozenset({"destroy"})
"""``TaskInfo.descriptionId`` suffixes (``VirtualMachine.<kind>``) of a VM's destroy task."""

CLONE_TASKS = frozenset({"clone", "cloneVm"})
"""``TaskInfo.descriptionId`` suffixes of a clone, on its source (vCenter ``VirtualMachine.clone``,
vcsim ``VirtualMachine.cloneVm``)."""

POWER_TASKS = frozenset({"powerOn", "powerOff", "suspend", "reset"})
"""``TaskInfo.descriptionId`` suffixes of a VM's power tasks (shutdownGuest is not a task)."""


def in_flight(content: Any, vm: Any, kinds: frozenset[str], type_: Any = None) -> list[Any]:
    """The VM's tasks of ``kinds`` that are queued or running, from ``vm.recentTask`` (vCenter
    keeps a VM's tasks there while they run and for a while after): 2 calls, none when the VM
    has no recent task. Empty when the VM no longer exists. Works for a process that did not
    start the task (a restarted manager), so the task key needs no storing for a VM that exists.
    A task this process saw end (``seen_ended``) is not read; the others are read together: 1
    call, 2 when a recent task was not seen ending here (a restarted process: was 1 per task).
    ``type_`` (default ``vim.VirtualMachine``): the managed object type of ``vm``;
    ``vim.TaskManager`` with ``content.taskManager`` gives every such task of the vCenter."""
    try:
        found = retrieve_objects(content, [vm], type_ or vim.VirtualMachine, ["recentTask"])
    except vmodl.fault.ManagedObjectNotFound:
        return []
    tasks = list(found[0].get("recentTask") or []) if found else []
    if not tasks:
        return []
    unseen = [task for task in tasks if not seen_ended(task)]
    if not unseen:
        return []
    out = []
    for info in _task_infos(content, unseen):
        kind = str(info.get("info.descriptionId") or "").rsplit(".", 1)[-1]
        if kind in kinds and str(info.get("info.state")) in ("queued", "running"):
            out.append(info.obj)
    return out


def _task_infos(content: Any, tasks: list[Any]) -> list[ObjectProps]:
    """State and kind of ``tasks`` in one RetrievePropertiesEx; a task vCenter forgot meanwhile
    is left out (``reportMissingObjectsInResults``: vcsim omits it, vCenter reports it in
    ``missingSet``). Raises vim.fault.NotAuthenticated (vcsim's per-property expired session)."""
    return retrieve_present(content, tasks, vim.Task, ["info.state", "info.descriptionId"])


async def wait_in_flight(run: Runner, vm: Any, kinds: frozenset[str], what: str, timeout: float, provider: str) -> bool:
    """Wait for every queued or running task of ``kinds`` on ``vm`` (``in_flight``) to end,
    whatever its result (the caller reads the VM's state afterwards). True when there was one.
    Raises TaskFailed (TaskTimeout) or Transient like ``wait_task``."""
    tasks = await run(lambda s: in_flight(s.content, vm, kinds))
    for task in tasks:
        try:
            await wait_task(run, task, what, timeout, provider)
        except Transient:
            raise
        except BackendError as exc:
            if exc.reason == "TaskTimeout":
                raise
    return bool(tasks)
