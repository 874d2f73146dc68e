"""What a role's reconcilers share at run time: client, cache, events, backend, options.

Built once per role by the role runner (``banlieue.cmd.roles``) and handed to each reconciler's
``setup(mgr, ctx)``; tests build it against the API-server double and vcsim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from banlieue.backends.base import Backend
from banlieue.options import Options
from banlieue.runtime.cache import Cache
from banlieue.runtime.client import Client
from banlieue.runtime.recorder import EventRecorder


def utc_now() -> datetime:
    """The current time, timezone-aware UTC (condition lastTransitionTime, scheduledAt)."""
    return datetime.now(UTC)


@dataclass
class RoleContext:
    """Dependencies of one role's reconcilers.

    ``field_manager`` is the role's server-side-apply field manager (SPEC §4). ``backend`` is
    None for the controller role (it talks to no hypervisor). ``namespace`` (None = all) and
    ``watch_filter`` (value of label ``cluster.x-k8s.io/watch-filter``, None = no filter) scope
    what is reconciled. ``max_concurrent_reconciles`` is per controller. ``vsphere_task_timeout``
    is in seconds. ``secret_resync_period``: seconds between re-reads of the referenced Secrets and
    ConfigMaps (``reconcilers.referenced``). ``allow_http_endpoints``: accept ``http://`` Provider
    endpoints (``--development-allow-http-endpoints``; never in production: the credentials
    would travel in clear text). ``now`` is injectable for tests.
    """

    client: Client
    cache: Cache
    recorder: EventRecorder
    field_manager: str
    backend: Backend | None = None
    namespace: str | None = None
    watch_filter: str | None = None
    max_concurrent_reconciles: int = Options.max_concurrent_reconciles
    vsphere_task_timeout: float = 600.0
    secret_resync_period: float = 300.0
    allow_http_endpoints: bool = False
    now: Callable[[], datetime] = field(default=utc_now)
