"""Re-read a Provider's credentials Secret as soon as vCenter refuses them (provider role, issue 22).

banlieue holds no list or watch on Secrets (docs/security.md, row 1): the Secrets a Provider names
are re-read by name every ``--secret-resync-period`` (``referenced``). A password rotated in
vCenter and in the Secret shows first as a refused login (``InvalidLogin``) when a session is lost
and logged in again with the old password: the backend tells its refused listeners the Provider
(``VSphereBackend.add_refused_listener``), and ``RefusedCredentials`` asks the role's store of
referenced objects to re-read that Provider's credentials Secret now (``reread_soon``: at most one
GET per ``REREAD_SPACING_SECONDS``, always after the refusal). A changed Secret is published to
the Provider and VSphereMachine controllers like any change the resync finds, so their next
reconcile builds a Connection with the new password (a new session), and the change watch, whose
key includes the credentials, starts again at once instead of after its pause for refused
credentials. An unchanged Secret publishes nothing: a password that is simply wrong costs one GET
per refused login at most, and never a reconcile loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import PROVIDER
from banlieue.reconcilers.parsed import parse_provider
from banlieue.reconcilers.referenced import referenced
from banlieue.runtime.kinds import SECRET
from banlieue.runtime.log import get_logger
from banlieue.runtime.manager import Manager

log = get_logger("banlieue.reconcilers.refused")


@runtime_checkable
class RefusalNotifier(Protocol):
    """What a backend offers to tell that vCenter refused a Provider's credentials."""

    def add_refused_listener(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


class RefusedCredentials:
    """A manager runnable: each refusal heard -> ``reread_soon`` of the Provider's credentials
    Secret (module docstring). ``heard`` counts the refusals (tests)."""

    need_leader_election = False  # sessions, and their logins, are this process's own

    def __init__(self, ctx: RoleContext, notifier: RefusalNotifier) -> None:
        self.ctx = ctx
        self.notifier = notifier
        self.heard = 0

    def reread(self, provider: str) -> None:
        """Ask for a re-read of the credentials Secret of ``provider`` (``namespace/name``), if it
        is a Provider in the cache. Call from the event loop."""
        self.heard += 1
        namespace, _, name = provider.rpartition("/")
        raw = self.ctx.cache.get(PROVIDER, name, namespace or None)
        parsed = parse_provider(raw) if raw is not None else None
        if parsed is None:
            return
        secret = parsed.spec.connection.credentials_ref.name
        log.info("vcenter refused the credentials; re-reading their Secret", provider=provider, secretName=secret)
        referenced(self.ctx.cache).reread_soon(self.ctx.client, SECRET, secret, parsed.metadata.namespace)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        providers: asyncio.Queue[str] = asyncio.Queue()

        def refused(provider: str) -> None:  # from a pool thread: hand over, never block
            loop.call_soon_threadsafe(providers.put_nowait, provider)

        remove = self.notifier.add_refused_listener(refused)
        try:
            while True:
                provider = await providers.get()
                try:
                    self.reread(provider)
                except Exception:  # a bug must not end the loop
                    log.exception("re-reading refused credentials failed", provider=provider)
        finally:
            remove()
            referenced(self.ctx.cache).cancel_rereads()


def hear_refusals(mgr: Manager, ctx: RoleContext) -> RefusedCredentials | None:
    """Add one ``RefusedCredentials`` to ``mgr`` per store of referenced objects (every
    controller of the role that logs in calls this; the first call adds it). None when the
    backend tells no refusals, or when another controller added it already."""
    store = referenced(ctx.cache)
    if store.refusals_heard or not isinstance(ctx.backend, RefusalNotifier):
        return None
    store.refusals_heard = True
    runnable = RefusedCredentials(ctx, ctx.backend)
    mgr.add(runnable)
    return runnable
