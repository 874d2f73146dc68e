"""Last known good vCenter Connection per Provider, in memory, for deletions (provider role).

During a namespace deletion the API server deletes the credentials Secret at once (it has no
finalizer), while the VSphereMachines and the Provider wait on their finalizers. Without the
Secret no Connection can be built and the VM could not be destroyed. So every Connection built
successfully by ``remembered_connection_for`` is kept here, keyed by ``<namespace>/<provider>``,
and a machine being deleted whose Provider's Secret is gone (or whose Provider object is gone)
uses the last one (``vspheremachine.decide``). Only deletion uses it: a running machine still
reports ``SecretMissing``.

The store lives only in this process's memory (one per manager ``Cache``, i.e. per role
process): it is never logged, written to the API or to disk, and ``repr`` shows only keys. A
process started after the Secret was deleted knows nothing and behaves as before (``Deleting``,
retry, a message naming the missing Secret). ``forget`` drops a Provider's entry once the
Provider itself is gone.
"""

from __future__ import annotations

import weakref

from banlieue.api.provider import Provider
from banlieue.backends.base import Connection
from banlieue.reconcilers.connection import connection_for
from banlieue.runtime.cache import Cache


class LastKnownConnections:
    """``<namespace>/<provider name>`` -> the last Connection built successfully for it."""

    def __init__(self) -> None:
        self._by_provider: dict[str, Connection] = {}

    def __repr__(self) -> str:
        return f"LastKnownConnections({sorted(self._by_provider)})"

    def remember(self, conn: Connection) -> None:
        """Keep ``conn`` as the last known one of ``conn.provider`` (``namespace/name``)."""
        self._by_provider[conn.provider] = conn

    def get(self, key: str) -> Connection | None:
        """The last known Connection of Provider ``key`` (``namespace/name``), None if never built."""
        return self._by_provider.get(key)

    def known(self, namespace: str | None) -> frozenset[str]:
        """Names of the Providers of ``namespace`` with a last known Connection."""
        prefix = f"{namespace or ''}/"
        return frozenset(k[len(prefix):] for k in self._by_provider if k.startswith(prefix))

    def forget(self, key: str) -> None:
        """Drop the entry of Provider ``key`` (``namespace/name``): the Provider is gone."""
        self._by_provider.pop(key, None)


_STORES: weakref.WeakKeyDictionary[Cache, LastKnownConnections] = weakref.WeakKeyDictionary()


def last_known(cache: Cache) -> LastKnownConnections:
    """The store shared by the reconcilers of the manager that owns ``cache`` (one per process
    role; separate managers in one test process never share credentials)."""
    store = _STORES.get(cache)
    if store is None:
        store = _STORES[cache] = LastKnownConnections()
    return store


def remembered_connection_for(provider: Provider, cache: Cache) -> Connection:
    """``connection.connection_for`` that also remembers a successful result in
    ``last_known(cache)``. Raises ConnectionConfigError like ``connection_for``."""
    conn = connection_for(provider, cache)
    last_known(cache).remember(conn)
    return conn
