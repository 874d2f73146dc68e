"""Child process for the SIGTERM test: a Manager with leader election and one controller whose
reconcile takes 1 s. Prints "reconciling" when a reconcile starts; exits 0 after shutdown."""

from __future__ import annotations

import asyncio
import sys

from runtime_helpers import WIDGET

from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.client import Client
from banlieue.runtime.config import config_for_url
from banlieue.runtime.manager import Manager
from banlieue.runtime.reconcile import Request, Result


class SlowReconciler:
    def __init__(self, mgr: Manager) -> None:
        self.mgr = mgr

    async def reconcile(self, request: Request) -> Result:
        print("reconciling", flush=True)
        await asyncio.sleep(1.0)
        await self.mgr.client.patch_status(WIDGET, request.name, request.namespace, {"status": {"drained": True}})
        return Result()


async def main(url: str, namespace: str) -> None:
    mgr = Manager(Client(config_for_url(url)), namespace=namespace, leader_election=True,
                  leader_election_id="sigterm-test", lease_duration=2.0, renew_deadline=1.5, retry_period=0.3,
                  metrics_bind_address="0", health_probe_bind_address="0", graceful_shutdown_timeout=10.0)
    ControllerBuilder(mgr).named("slow").for_(WIDGET).complete(SlowReconciler(mgr))
    try:
        await mgr.start()
    except asyncio.CancelledError:
        print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
