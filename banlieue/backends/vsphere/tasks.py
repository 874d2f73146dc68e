"""Waiting for vSphere tasks without holding a thread, from asyncio.

Two ways to learn that a task ended:

- **The change watch** (``watch.VMWatch``): its collector also follows ``TaskManager.recentTask``
  (every queued, running or recently finished task of the session; vCenter keeps at most 200,
  vcsim the same) with ``info.state`` and ``info.result``, and hands what it sees to the
  session stub's :class:`TaskBoard`. While that board is live (the watch's collector applied its
  first batch), ``wait_task`` sends nothing: it waits for the board. A success whose result the
  board holds (a managed object reference, or none) is returned as is; an error is read once
  (``info.error``: the fault). This replaced the polls below, which were most of banlieue's
  vCenter requests per machine (docs/performance.md, "The 4-requests floor").
- **Polling** (no watch on the session, a board not live, or nothing heard for
  ``BOARD_QUIET_SECONDS``: a task pushed out of the 200 recent ones, a watch that lags): one
  RetrievePropertiesEx on the task (state, error, result); the first poll is immediate (short
  tasks are often done by then), then 0.1 s doubling to 2 s.

A task that has not finished within ``timeout`` seconds (``--vsphere-task-timeout``, default
600 s) raises TaskFailed(reason="TaskTimeout"); the task itself keeps running in vCenter.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import BackendError, TaskFailed, Transient
from banlieue.backends.vsphere import metrics
from banlieue.backends.vsphere.faults import task_error
from banlieue.backends.vsphere.properties import ObjectProps, moid, retrieve_objects
from banlieue.backends.vsphere.session import Session

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl

T = TypeVar("T")


class Runner(Protocol):
    """Runs a blocking ``fn(session)`` in the vCenter's pool (SessionPool.run bound to a Connection)."""

    def __call__(self, fn: Callable[[Session], T]) -> Awaitable[T]: ...


TASK_BOARD = "banlieue_task_board"
"""Attribute of a session's SOAP stub holding its :class:`TaskBoard` (set by the change watch):
a task object reaches its board through ``task._stub``, the stub that created it."""

BOARD_QUIET_SECONDS = 10.0
"""Seconds ``wait_task`` waits on a live board without hearing of its task before it polls once
(the task left the 200 recent ones, or the watch lags); then again after each such interval."""

BOARD_KEPT = 4096
"""Task states a board remembers (oldest dropped first): a wait that starts after its task
ended still finds the outcome."""

NO_RESULT = object()
"""``TaskSeen.result`` when the watch saw a result it does not keep (not a managed object)."""


@dataclass(frozen=True, slots=True)
class TaskSeen:
    """What the watch last saw of a task: ``state`` (queued, running, success, error; "" for a
    task that left the collector's view) and ``result`` (type name, moref) of a managed object,
    None for none, ``NO_RESULT`` for another value."""

    state: str
    result: Any = None


class TaskBoard:
    """Task states reported by a session's change watch (module docstring); thread-safe.

    The watch thread calls ``seen``/``left``/``set_live``; waiters (on any event loop) call
    ``get`` and ``wait``. ``live`` is True only while the watch's current collector has applied its
    first batch: then every task of the session that is in ``recentTask`` is reported as it
    changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._states: OrderedDict[str, TaskSeen] = OrderedDict()
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self.live = False

    def get(self, moref: str) -> TaskSeen | None:
        with self._lock:
            return self._states.get(moref)

    def seen(self, moref: str, state: str | None, result: Any = None, has_result: bool = False) -> None:
        """Record a task's change (``state`` None: unchanged; ``has_result``: ``result`` was in
        the change) and wake its waiters."""
        with self._lock:
            old = self._states.pop(moref, None)
            new = TaskSeen(state if state is not None else (old.state if old else ""),
                           result if has_result else (old.result if old else None))
            self._states[moref] = new
            while len(self._states) > BOARD_KEPT:
                self._states.popitem(last=False)
        self._wake(moref)

    def left(self, moref: str) -> None:
        """The task left the collector's view (pushed out of ``recentTask``): its waiters poll."""
        with self._lock:
            old = self._states.pop(moref, None)
            if old is not None and old.state in ("success", "error"):
                self._states[moref] = old  # ended before it left: the outcome stands
            else:
                self._states[moref] = TaskSeen("")
        self._wake(moref)

    def set_live(self, live: bool) -> None:
        """The watch's collector applied its first batch (True) or stopped (False: wake every
        waiter, which polls from then on)."""
        self.live = live
        if not live:
            with self._lock:
                refs = list(self._waiters)
            for ref in refs:
                self._wake(ref)

    def _wake(self, moref: str) -> None:
        with self._lock:
            waiters = list(self._waiters.get(moref, ()))
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    async def wait(self, moref: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for news of ``moref``; False when none came."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.setdefault(moref, []).append(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                waiters = self._waiters.get(moref, [])
                if entry in waiters:
                    waiters.remove(entry)
                if not waiters:
                    self._waiters.pop(moref, None)


def board_of(task: Any) -> TaskBoard | None:
    """The :class:`TaskBoard` of the stub that created ``task`` (None: no watch on its session)."""
    board = getattr(getattr(task, "_stub", None), TASK_BOARD, None)
    return board if isinstance(board, TaskBoard) else None


def _task_info(task: Any) -> Callable[[Session], ObjectProps]:
    def read(s: Session) -> ObjectProps:
        return retrieve_objects(s.content, [task], vim.Task, ["info.state", "info.error", "info.result"])[0]

    return read


async def wait_task(run: Runner, task: Any, what: str, timeout: float, provider: str) -> Any:
    """Wait for ``task``; return ``info.result``. Raises TaskFailed (fault message) or on timeout.
    ``provider`` (``namespace/name``) labels the tasks-in-flight gauge."""
    gauge = metrics.TASKS_IN_FLIGHT.labels(provider)
    gauge.inc()
    try:
        deadline = time.monotonic() + timeout
        delay = 0.1
        board = board_of(task)
        ref = moid(task)
        poll = board is None or not board.live
        while True:
            seen = board.get(ref) if board is not None else None
            if seen is not None and seen.state == "success" and seen.result is not NO_RESULT:
                return _as_object(seen.result, task)
            if poll or (seen is not None and seen.state in ("success", "error", "")):
                info = await run(_task_info(task))
                state = info.get("info.state")
                if state == "success":
                    return info.get("info.result")
                if state == "error":
                    raise task_error(info.get("info.error"), what)
            if time.monotonic() >= deadline:
                raise TaskFailed(f"{what}: not finished after {timeout:.0f} s", reason="TaskTimeout")
            remaining = max(deadline - time.monotonic(), 0)
            if board is not None and board.live and (seen is None or seen.state != ""):
                # Sends nothing: the watch reports the task's changes. Polled once when nothing
                # was heard for a while, or when the board stopped (set_live(False) wakes us).
                heard = await board.wait(ref, min(BOARD_QUIET_SECONDS, remaining))
                poll = not heard or not board.live
                continue
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 2.0)
            poll = True
    finally:
        gauge.dec()


def _as_object(result: Any, task: Any) -> Any:
    """A board's ``(type, moref)`` result as a pyVmomi managed object on the task's stub."""
    if result is None:
        return None
    type_name, ref = result
    return getattr(vim, type_name)(ref, task._stub)


DESTROY_TASKS = frozenset({"destroy"})
"""``TaskInfo.descriptionId`` suffixes (``VirtualMachine.<kind>``) of a VM's destroy task."""

POWER_TASKS = frozenset({"powerOn", "powerOff", "suspend", "reset"})
"""``TaskInfo.descriptionId`` suffixes of a VM's power tasks (shutdownGuest is not a task)."""


def in_flight(content: Any, vm: Any, kinds: frozenset[str]) -> list[Any]:
    """The VM's tasks of ``kinds`` that are queued or running, from ``vm.recentTask`` (vCenter
    keeps a VM's tasks there while they run and for a while after): 2 calls, none when the VM
    has no recent task. Empty when the VM no longer exists. Works for a process that did not
    start the task (a restarted manager), so the task key needs no storing for a VM that exists."""
    try:
        found = retrieve_objects(content, [vm], vim.VirtualMachine, ["recentTask"])
    except vmodl.fault.ManagedObjectNotFound:
        return []
    tasks = list(found[0].get("recentTask") or []) if found else []
    if not tasks:
        return []
    out = []
    for task in tasks:
        try:
            [info] = retrieve_objects(content, [task], vim.Task, ["info.state", "info.descriptionId"])
        except (vmodl.fault.ManagedObjectNotFound, ValueError):
            continue  # vCenter forgot the task meanwhile
        kind = str(info.get("info.descriptionId") or "").rsplit(".", 1)[-1]
        if kind in kinds and str(info.get("info.state")) in ("queued", "running"):
            out.append(task)
    return out


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
