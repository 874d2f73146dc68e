"""One shared informer per kind for every Manager of a process (client-go SharedInformerFactory).

controller-runtime gives each manager one cache: every controller of the manager shares one
informer per kind. ``banlieue manager`` runs two roles in one process, each with its own Manager
(one Lease per role), and both roles watch some kinds (VSphereMachines, Providers): with one
cache per Manager each such object was listed, decoded and stored twice. Managers built with
the same ``InformerFactory`` share its informers instead: one LIST/WATCH and one store per kind,
each Manager's controllers registering their own event handlers on it.

Lifecycle: the informers run while at least one Manager that uses the factory runs. Each
``Manager.start`` calls :meth:`InformerFactory.acquire` (the first one starts every informer
created so far; informers created later start at once) and its shutdown calls
:meth:`InformerFactory.release` (the last one cancels them and waits for them to end). The
factory never closes its client: whoever created the client closes it after the Managers stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from banlieue.runtime.client import Client
from banlieue.runtime.informer import Informer
from banlieue.runtime.kinds import ResourceKind

LabelSelectorFor = Mapping[ResourceKind, str] | Callable[[ResourceKind], str | None]


class InformerFactory:
    """The informers of one client and scope, one per kind, shared by the Managers given it.

    ``namespace`` scopes every informer (None = all namespaces); ``label_selector_for`` maps a
    kind to an API label selector string (a mapping or a function; None = no selector);
    ``informer_options`` are passed to every ``Informer`` (e.g. ``watch_silence_timeout``).
    Single event loop; no locking.
    """

    def __init__(
        self,
        client: Client,
        *,
        namespace: str | None = None,
        label_selector_for: LabelSelectorFor | None = None,
        informer_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self._selector_for = label_selector_for
        self._options = dict(informer_options or {})
        self._informers: dict[ResourceKind, Informer] = {}
        self._tasks: dict[ResourceKind, asyncio.Task[None]] = {}
        self._users = 0

    def _label_selector(self, kind: ResourceKind) -> str | None:
        if self._selector_for is None:
            return None
        if isinstance(self._selector_for, Mapping):
            return self._selector_for.get(kind)
        return self._selector_for(kind)

    def get(self, kind: ResourceKind) -> Informer:
        """The shared informer of ``kind``, created on first use (and started at once while
        the factory runs)."""
        informer = self._informers.get(kind)
        if informer is None:
            informer = Informer(
                self.client, kind, namespace=self.namespace, label_selector=self._label_selector(kind), **self._options,
            )
            self._informers[kind] = informer
            if self._users:
                self._start(kind, informer)
        return informer

    def informers(self) -> list[Informer]:
        """Every informer created so far (synced or not)."""
        return list(self._informers.values())

    @property
    def running(self) -> bool:
        """True between the first :meth:`acquire` and the last :meth:`release`."""
        return self._users > 0

    def _start(self, kind: ResourceKind, informer: Informer) -> None:
        self._tasks[kind] = asyncio.create_task(informer.run(), name=f"informer {kind}")

    def acquire(self) -> None:
        """A Manager starts using the informers: the first call starts every informer."""
        self._users += 1
        if self._users == 1:
            for kind, informer in self._informers.items():
                if kind not in self._tasks:
                    self._start(kind, informer)

    async def release(self) -> None:
        """A Manager stopped using the informers: the last call cancels them and waits for
        their tasks to end. A call without a matching :meth:`acquire` does nothing."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users:
            return
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
