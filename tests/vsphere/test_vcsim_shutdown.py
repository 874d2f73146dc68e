"""A simulator told to stop exits within seconds, even with a long poll in progress.

Found by a new-user pass (issue 24): ``kill -9`` of ``banlieue dev`` left both simulators
running, re-parented to PID 1. They had got the stop signal (the dev children's parent-death
signal is SIGTERM) but the deferred ``srv.Close`` waited for a ``WaitForUpdatesEx`` whose client
had died with the manager, for the whole of its wait. ``hack/vcsim`` now exits after a short grace
(``shutdownGrace``) whatever is in progress.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]

POLL = textwrap.dedent("""
    import ssl, sys
    from pyVim.connect import SmartConnect
    from pyVmomi import vim, vmodl
    PC = vmodl.query.PropertyCollector
    si = SmartConnect(host=sys.argv[1], port=int(sys.argv[2]), user=sys.argv[3], pwd=sys.argv[4],
                      sslContext=ssl.create_default_context(cafile=sys.argv[5]))
    pc = si.content.propertyCollector
    spec = PC.FilterSpec(objectSet=[PC.ObjectSpec(obj=si.content.rootFolder)],
                         propSet=[PC.PropertySpec(type=vim.Folder, pathSet=["name"])])
    pc.CreateFilter(spec, True)
    version = pc.WaitForUpdatesEx("", PC.WaitOptions(maxWaitSeconds=120)).version
    print("polling", flush=True)
    pc.WaitForUpdatesEx(version, PC.WaitOptions(maxWaitSeconds=120))
""")


def test_a_stopped_simulator_exits_with_a_long_poll_in_progress(vcsim: VcsimProcess) -> None:
    poller = subprocess.Popen([sys.executable, "-c", POLL, vcsim.host, str(vcsim.port), vcsim.username,
                               vcsim.password, vcsim.ca_file], stdout=subprocess.PIPE, text=True)
    try:
        assert poller.stdout is not None
        assert poller.stdout.readline().strip() == "polling", "the long poll did not start"
        time.sleep(1.0)  # the second WaitForUpdatesEx is now held by the simulator
    finally:
        poller.kill()  # its client dies, as the manager does with a killed dev
        poller.wait(timeout=10)
    started = time.monotonic()
    vcsim.process.send_signal(signal.SIGTERM)
    try:
        vcsim.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail("the simulator was still running 15 s after SIGTERM (a long poll held its shutdown)")
    took = time.monotonic() - started
    # Before the fix: alive for the poll's whole 120 s wait.
    assert took < 10, f"exited {took:.1f} s after SIGTERM"

