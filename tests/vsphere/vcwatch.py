"""Test helpers for the vCenter change watch: collect ``backend.watch(conn)`` into a queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from banlieue.backends.base import Connection, VMChange
from banlieue.backends.vsphere.backend import VSphereBackend


@contextlib.asynccontextmanager
async def watching(backend: VSphereBackend, conn: Connection) -> AsyncIterator[asyncio.Queue[VMChange]]:
    """Run the watch in a task for the block's duration; its changes arrive on the yielded queue."""
    queue: asyncio.Queue[VMChange] = asyncio.Queue()

    async def pump() -> None:
        async for change in backend.watch(conn):
            queue.put_nowait(change)

    task = asyncio.create_task(pump())
    try:
        yield queue
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def next_for(queue: asyncio.Queue[VMChange], uid: str, kind: str, timeout: float = 20) -> VMChange:
    """The next change of ``kind`` for ``uid``, skipping others; TimeoutError after ``timeout`` s."""
    async with asyncio.timeout(timeout):
        while True:
            change = await queue.get()
            if change.uid == uid and change.kind == kind:
                return change


async def until_authoritative(backend: VSphereBackend, conn: Connection, timeout: float = 20) -> None:
    """Wait until the watch's first pass made the VM index answer lookups (``VMIndex.authoritative``);
    TimeoutError after ``timeout`` s."""
    async with asyncio.timeout(timeout):
        while not backend._vm_index(conn).authoritative:
            await asyncio.sleep(0.05)
