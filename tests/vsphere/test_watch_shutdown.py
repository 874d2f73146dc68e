"""A process whose change watch is in a long poll against a vCenter that stopped answering still
exits promptly: the poll runs on a daemon thread (``watch.DaemonExecutor``), not on a
ThreadPoolExecutor thread that the interpreter joins at exit (a new user's stopped manager stayed
alive until the 600 s poll returned)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]

CHILD = textwrap.dedent('''
    import asyncio, os, sys
    from banlieue.backends.base import Connection
    from banlieue.backends.vsphere.backend import VSphereBackend

    async def main() -> None:
        conn = Connection(provider="default/vc", endpoint=os.environ["VC_ENDPOINT"], username=os.environ["VC_USER"],
                          password=os.environ["VC_PASSWORD"], ca_bundle=open(os.environ["VC_CA"]).read())
        backend = VSphereBackend(max_workers=2, task_timeout=10.0, request_timeout=3.0, watch_max_wait=600.0)

        async def pump() -> None:
            async for _ in backend.watch(conn):
                pass

        task = asyncio.create_task(pump())
        await asyncio.sleep(2.0)  # the first batch is in; the next long poll is outstanding
        print("polling", flush=True)
        sys.stdin.readline()  # the parent has frozen the vCenter
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        await backend.close()
        print("stopped", flush=True)

    asyncio.run(main())
''')


def test_a_stopped_process_does_not_wait_for_a_hung_long_poll(vcsim_factory: Callable[..., VcsimProcess]) -> None:
    vc = vcsim_factory()
    env = {**os.environ, "VC_ENDPOINT": vc.endpoint, "VC_USER": vc.username, "VC_PASSWORD": vc.password,
           "VC_CA": vc.ca_file}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        for line in child.stdout:  # structlog's lines come on stdout too
            if line.strip() == "polling":
                break
        else:
            pytest.fail(f"child ended early: {child.stderr.read() if child.stderr else ''}")
        os.kill(vc.process.pid, signal.SIGSTOP)  # vCenter hangs: CancelWaitForUpdates cannot get through
        try:
            started = time.monotonic()
            child.stdin.write("go\n")
            child.stdin.flush()
            out, err = child.communicate(timeout=60)
            took = time.monotonic() - started
        finally:
            os.kill(vc.process.pid, signal.SIGCONT)
        assert child.returncode == 0, err[-2000:]
        assert "stopped" in out
        assert took < 30, took  # the cancel's request timeout (3 s) and the pool's, not the 600 s poll
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
