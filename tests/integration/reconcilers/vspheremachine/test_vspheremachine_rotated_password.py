"""A vCenter password rotated while machines are provisioned and nothing else happens (issue 22).

The administrator changes the password in vCenter (vcsim ``--password-file``: the simulator reads
it at every Login) and in the Provider's credentials Secret. banlieue's sessions stay valid until
vCenter ends them (here ``SessionManager.TerminateSession``, as vcsim-notes.md says); the change
watch then logs in again with the password it holds, and vCenter refuses it (``InvalidLogin``).
banlieue must re-read the Secret at once and reconnect with the new password within seconds, not
at the next periodic re-read of the Secret (``--secret-resync-period``, set beyond the test here)
and not after the watch's pause for refused credentials (300 s). Reconnected means: a VM destroyed
by hand after the rotation is reported (``VMNotFound``), which needs a working session.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim
from reconciler_harness import b64, eventually, vms_with_uid
from test_vspheremachine_vcsim import _settled, machine, make_provider, running, wait_reason

from banlieue.reconcilers.kinds import SECRET, VSPHERE_MACHINE
from banlieue.runtime.client import Client
from banlieue.testing.vcsim import wait_task

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(90)]

RESYNC_BEYOND_THE_TEST = 600.0
"""--secret-resync-period: no periodic re-read of the Secret happens during the test."""
RECONNECT_WITHIN = 15.0
"""Seconds from the sessions' end to the removal being reported: the watch polls every 2 s
(``watch_max_wait``), the re-read waits for nothing, the watch set is re-evaluated within 5 s."""


async def test_rotated_password_reconnects_in_seconds_without_the_resync(
    apiserver: Any, client: Client, ns: str, vcsim_factory: Any, tmp_path: Path,
) -> None:
    password_file = tmp_path / "vcenter-password"
    password_file.write_text("before-rotation\n")
    vc = vcsim_factory(dc=1, cluster=1, password_file=str(password_file))
    assert vc.password == "before-rotation"
    await make_provider(client, ns, vc)
    async with running(apiserver, ns, secret_resync_period=RESYNC_BEYOND_THE_TEST) as r:
        created = await client.create(VSPHERE_MACHINE, machine("m1", ns, powerState="PoweredOff"))
        uid = created["metadata"]["uid"]
        await wait_reason(client, ns, "m1", "Provisioned")
        await eventually(lambda: _settled(r, ns, "m1"), what="controller settled")

        # Rotation: vCenter first, then the Secret; banlieue's sessions still work meanwhile.
        password_file.write_text("after-rotation\n")
        secret = await client.get(SECRET, "vc1-creds", ns)
        secret["data"]["password"] = b64("after-rotation")
        await client.update(SECRET, secret)
        context = ssl.create_default_context(cafile=vc.ca_file)
        with pytest.raises(vim.fault.InvalidLogin):
            SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd="before-rotation", sslContext=context)
        admin = SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd="after-rotation", sslContext=context)
        try:
            [vm] = vms_with_uid(admin, uid)
            manager = admin.content.sessionManager
            own = manager.currentSession.key
            others = [s.key for s in manager.sessionList or [] if s.key != own]
            assert others, "banlieue holds a session"
            manager.TerminateSession(sessionId=others)
            ended = time.monotonic()
            wait_task(vm.Destroy_Task())
            obj = await wait_reason(client, ns, "m1", "VMNotFound", timeout=RECONNECT_WITHIN)
            took = time.monotonic() - ended
            print(f"\nrotated password: reconnected and reported the removal {took:.1f} s after the sessions ended")
            assert obj["status"]["instanceUUID"]
            # The session banlieue holds now was opened with the new password.
            fresh = [s for s in manager.sessionList or [] if s.key != own]
            assert fresh, "banlieue logged in again"
        finally:
            Disconnect(admin)
        await client.delete(VSPHERE_MACHINE, "m1", ns)
        await asyncio.wait_for(_deleted(client, ns), timeout=30)


async def _deleted(client: Client, ns: str) -> None:
    from banlieue.runtime.errors import NotFound

    while True:
        try:
            await client.get(VSPHERE_MACHINE, "m1", ns)
        except NotFound:
            return
        await asyncio.sleep(0.2)
