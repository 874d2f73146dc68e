"""Task completion from the change watch (``tasks.TaskBoard``) instead of polling ``info.state``.

Against vcsim: with a watch running on the session, a clone, a reconfigure and a power-on are
waited for without a single RetrievePropertiesEx on a task, and a task that fails still raises
its fault. Without a watch the polls come back (the counter below can fail). The fallback when the
watch loses sight of a task is tested on the board itself.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from vcwatch import watching

from banlieue.backends.base import Connection, TaskFailed, VMSpec
from banlieue.backends.vsphere import tasks
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.backends.vsphere.tasks import TASK_BOARD, TaskBoard, board_of, wait_task


@pytest.fixture
def task_polls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every RetrievePropertiesEx of ``wait_task`` on a task (the moref polled), as it is sent."""
    polled: list[str] = []
    original = tasks._task_info

    def counting(task: Any) -> Any:
        read = original(task)

        def run(s: Any) -> Any:
            polled.append(str(task._moId))
            return read(s)

        return run

    monkeypatch.setattr(tasks, "_task_info", counting)
    return polled


def spec_for(uid: str) -> VMSpec:
    return VMSpec(uid=uid, name=f"tb-{uid[:8]}", datacenter="DC0", cluster="DC0_C0", template="ubuntu-22.04",
                  num_cpus=2, memory_mib=256)


async def live_board(backend: VSphereBackend, conn: Connection) -> TaskBoard:
    [sess] = backend.sessions.sessions.values()
    async with asyncio.timeout(20):
        while True:
            board = getattr(sess.stub, TASK_BOARD, None)
            if isinstance(board, TaskBoard) and board.live:
                return board
            await asyncio.sleep(0.05)



@pytest.mark.vcsim
@pytest.mark.timeout(90)
async def test_with_a_watch_tasks_are_waited_for_without_polling(
    backend: VSphereBackend, conn: Connection, task_polls: list[str]
) -> None:
    uid = str(uuid.uuid4())
    await backend.check_connection(conn)
    async with watching(backend, conn):
        await live_board(backend, conn)
        created = await backend.create_vm(conn, spec_for(uid))  # clone + reconfigure (CPU, memory, guestinfo)
        on = await backend.set_power_state(conn, uid, "PoweredOn")
        assert task_polls == []
        assert created.created and created.vm.num_cpus == 2 and created.vm.memory_mib == 256
        assert on.power_state == "PoweredOn"
        info = await backend.find_vm(conn, uid)
        assert info is not None and info.power_state == "PoweredOn" and info.moref == created.vm.moref


@pytest.mark.vcsim
@pytest.mark.timeout(90)
async def test_without_a_watch_tasks_are_polled(
    backend: VSphereBackend, conn: Connection, task_polls: list[str]
) -> None:
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec_for(uid))
    await backend.set_power_state(conn, uid, "PoweredOn")
    assert len(task_polls) >= 3  # clone, reconfigure, power-on: at least one poll each


@pytest.mark.vcsim
@pytest.mark.timeout(90)
async def test_a_failed_task_seen_by_the_watch_raises_its_fault(
    backend: VSphereBackend, conn: Connection, task_polls: list[str]
) -> None:
    uid = str(uuid.uuid4())
    await backend.create_vm(conn, spec_for(uid))
    await backend.set_power_state(conn, uid, "PoweredOn")
    async with watching(backend, conn):
        await live_board(backend, conn)
        task_polls.clear()
        found = await backend._locate(conn, uid)
        assert found is not None
        vm = found[0]
        run = backend._runner(conn)
        # A second power-on of a running VM: the task ends in error (InvalidPowerState).
        task = await run(lambda s: vm.PowerOnVM_Task())
        assert board_of(task) is not None
        with pytest.raises(TaskFailed):
            await wait_task(run, task, "power on again", 30.0, conn.provider)
        assert task_polls == [str(task._moId)]  # one read, for the fault


async def test_a_task_the_watch_lost_sight_of_is_polled() -> None:
    """A task pushed out of ``recentTask`` ("leave") before it ended: its waiter polls it."""
    board = TaskBoard()
    board.live = True
    task = SimpleNamespace(_moId="task-7", _stub=SimpleNamespace(**{TASK_BOARD: board}))
    reads: list[str] = []

    async def run(fn: Any) -> Any:
        reads.append("poll")
        return {"info.state": "success" if len(reads) > 1 else "running", "info.result": "vm-9"}

    waiter = asyncio.ensure_future(wait_task(run, task, "clone", 30.0, "default/vc"))
    await asyncio.sleep(0.1)
    assert reads == [] and not waiter.done()  # a live board: nothing sent
    board.seen("task-7", "running")
    await asyncio.sleep(0.1)
    assert reads == []
    board.left("task-7")
    assert await asyncio.wait_for(waiter, 10) == "vm-9"
    assert reads == ["poll", "poll"]


async def test_a_board_that_stops_hands_its_waiters_to_polling() -> None:
    board = TaskBoard()
    board.live = True
    task = SimpleNamespace(_moId="task-8", _stub=SimpleNamespace(**{TASK_BOARD: board}))
    reads: list[str] = []

    async def run(fn: Any) -> Any:
        reads.append("poll")
        return {"info.state": "success", "info.result": None}

    waiter = asyncio.ensure_future(wait_task(run, task, "power on", 30.0, "default/vc"))
    await asyncio.sleep(0.1)
    assert reads == []
    board.set_live(False)  # the watch's collector went (re-login, vCenter unreachable)
    assert await asyncio.wait_for(waiter, 10) is None
    assert reads == ["poll"]


async def test_an_outcome_seen_before_the_wait_is_not_asked_again() -> None:
    board = TaskBoard()
    board.live = True
    board.seen("task-9", "success", ("VirtualMachine", "vm-42"), has_result=True)
    task = SimpleNamespace(_moId="task-9", _stub=SimpleNamespace(**{TASK_BOARD: board}))

    async def run(fn: Any) -> Any:
        raise AssertionError("nothing is sent for an outcome the watch saw")

    vm = await wait_task(run, task, "clone", 30.0, "default/vc")
    assert vm._moId == "vm-42" and type(vm).__name__.endswith("VirtualMachine")
