"""The provider role for the reconciler integration tests: a running Manager with some of the
role's reconcilers (``running_role``) and the Secret and Provider objects they read.

Imported as ``from provider_role import ...`` (this directory is on ``sys.path``, see
reconciler_harness.py) by the Provider, VMImage and VSphereMachineTemplate tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from reconciler_harness import b64, eventually, new_client

from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import FIELD_MANAGER_PROVIDER_VSPHERE, PROVIDER
from banlieue.runtime.client import Client
from banlieue.runtime.controller import Controller
from banlieue.runtime.manager import Manager
from banlieue.testing.vcsim import VcsimProcess

Setup = Callable[[Manager, RoleContext], Controller]


@contextlib.asynccontextmanager
async def running_role(apiserver: Any, setups: Sequence[Setup], backend: VSphereBackend | None = None) -> AsyncIterator[RoleContext]:
    """A provider-role Manager with ``setups`` registered, running until the block exits."""
    client = new_client(apiserver.url)
    mgr = Manager(
        client, metrics_bind_address="0", health_probe_bind_address="0", graceful_shutdown_timeout=5.0,
        handle_signals=False, cache_sync_timeout=20.0,
    )
    ctx = RoleContext(
        client=client, cache=mgr.cache, recorder=mgr.get_event_recorder(FIELD_MANAGER_PROVIDER_VSPHERE),
        field_manager=FIELD_MANAGER_PROVIDER_VSPHERE, backend=backend, max_concurrent_reconciles=4,
        secret_resync_period=0.5,  # Secrets are re-read by name (reconcilers.referenced), not watched
    )
    for setup in setups:
        setup(mgr, ctx)
    task = asyncio.create_task(mgr.start())
    try:
        yield ctx
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def secret_body(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
        "data": {k: b64(v) for k, v in data.items()},
    }


def provider_body(name: str, namespace: str, vc: VcsimProcess, *, ca: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    connection: dict[str, Any] = {"endpoint": vc.endpoint, "credentialsRef": {"name": f"{name}-creds"}}
    connection["caBundle"] = {"inline": vc.ca_pem} if ca is None else ca
    if not connection["caBundle"]:
        del connection["caBundle"]
    return {
        "apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "providerClassRef": {"name": "vsphere"},
            "connection": connection,
            "capabilities": {
                "storageClasses": [
                    {"name": "local", "target": {"datastore": "LocalDS_0"}},
                    {"name": "ghost", "target": {"datastore": "NoSuchDS"}},
                ],
                "networkClasses": [
                    {"name": "lan", "target": {"portGroup": "VM Network"}},
                    {"name": "dc0-only", "target": {"distributedPortGroup": "DC0_DVPG0"}},
                ],
            },
            **spec,
        },
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def provider_with(client: Client, name: str, namespace: str, reason: str, status: str | None = None) -> dict[str, Any]:
    """The Provider once its Ready condition has ``reason`` (and ``status``)."""

    async def check() -> dict[str, Any] | None:
        obj = await client.get(PROVIDER, name, namespace)
        ready = condition(obj, "Ready")
        ok = ready.get("reason") == reason and (status is None or ready.get("status") == status)
        return obj if ok else None

    result: dict[str, Any] = await eventually(check, timeout=45.0, what=f"Provider {namespace}/{name} Ready reason {reason}")
    return result


@dataclass
class SilentListener:
    """A 127.0.0.1 listener that accepts TCP connections and never answers (a hung or hostile
    vCenter endpoint): ``endpoint`` for a Provider, ``accepted`` the connections it took."""

    port: int
    accepted: list[socket.socket] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def silent_listener() -> Iterator[SilentListener]:
    """A :class:`SilentListener`, accepting in a thread until the block exits; then every
    connection and the socket are closed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    listener = SilentListener(sock.getsockname()[1])
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                listener.accepted.append(sock.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        stop.set()
        thread.join()
        for conn in listener.accepted:
            conn.close()
        sock.close()


def answered_calls(seconds: float) -> Callable[[Any], int]:
    """A session function that keeps the vCenter answering for ``seconds``: ``CurrentTime``
    every 0.1 s (each a real round trip, counted as an answer), returning how many were sent."""

    def keep_answering(s: Any) -> int:
        sent = 0
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            s.si.CurrentTime()
            sent += 1
            time.sleep(0.1)
        return sent

    return keep_answering
