"""Which VSphereMachines to reconcile when a vCenter answers again (provider role).

A machine whose vCenter stopped answering is ``Ready`` False ``ConnectFailed`` and re-checked
every ``RETRY_SECONDS`` (60 s), or deleting and re-trying as often. When the backend notices the
vCenter is back (``VSphereBackend.add_reconnect_listener``: the change watch's retries, a login
or any call got an answer), those machines are enqueued at once instead of waiting for their
recheck: the machines of every vSphere Provider on that endpoint that are ``ConnectFailed`` or
deleting. A machine whose Provider cannot be told (no ``spec.providerRef``, no
``banlieue.io/provider`` label) is included when it is in such a Provider's namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from banlieue.api.infrastructure import VSphereMachineReason
from banlieue.backends.base import BackendError, Connection
from banlieue.reconcilers.connection import ConnectionConfigError
from banlieue.reconcilers.kinds import LABEL_PROVIDER, VSPHERE_MACHINE
from banlieue.runtime.cache import Cache
from banlieue.runtime.reconcile import Request

WAITING_REASONS = frozenset({VSphereMachineReason.CONNECT_FAILED})
"""Ready reasons of a machine waiting for its vCenter to answer."""


@runtime_checkable
class ReconnectNotifier(Protocol):
    """What a backend offers to tell that a vCenter answers again (``VSphereBackend``)."""

    def endpoint_label(self, conn: Connection) -> str: ...

    def add_reconnect_listener(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


def _ready_reason(raw: Mapping[str, Any]) -> str | None:
    for cond in (raw.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return str(cond.get("reason") or "")
    return None


def _provider_of(raw: Mapping[str, Any]) -> str | None:
    ref = ((raw.get("spec") or {}).get("providerRef") or {}).get("name")
    return str(ref) if ref else ((raw.get("metadata") or {}).get("labels") or {}).get(LABEL_PROVIDER)


def machines_waiting_on(
    label: str, connections: Iterable[Connection], notifier: ReconnectNotifier, cache: Cache
) -> list[Request]:
    """Requests for the machines of the Providers whose connection (``connections``) is on
    endpoint ``label`` that wait on a connection error or are deleting (module docstring)."""
    names: dict[str, set[str]] = {}
    for conn in connections:
        try:
            if notifier.endpoint_label(conn) != label:
                continue
        except (BackendError, ConnectionConfigError):
            continue
        namespace, _, name = conn.provider.partition("/")
        names.setdefault(namespace, set()).add(name)
    out: list[Request] = []
    for namespace, providers in names.items():
        # One decoded machine at a time (Cache.iter_objects): a namespace may hold 10,000.
        for raw in cache.iter_objects(VSPHERE_MACHINE, namespace):
            meta = raw.get("metadata") or {}
            deleting = bool(meta.get("deletionTimestamp"))
            if not deleting and _ready_reason(raw) not in WAITING_REASONS:
                continue
            provider = _provider_of(raw)
            if provider is None or provider in providers:
                out.append(Request(str(meta.get("namespace") or ""), str(meta["name"])))
    return out
