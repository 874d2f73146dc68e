"""Role runners: wire the runtime Manager with the reconcilers of each role (SPEC §4-§5).

``run_role(role, options)`` loads the kubeconfig (or the in-cluster service account), checks the
API server answers (one bounded ``GET /version``: fail fast with a one-line StartupError rather
than retrying forever), then builds one runtime ``Manager`` per role:

* ``controller``: VirtualMachine, VSphereCluster; field manager ``banlieue.io/controller``,
  Lease ``banlieue-controller``; no backend.
* ``provider-vsphere``: Provider, VMImage, VSphereMachine, VSphereMachineTemplate; field manager
  ``banlieue.io/provider-vsphere``, Lease ``banlieue-provider-vsphere``; one ``VSphereBackend``
  (closed on shutdown).
* ``manager``: both, in one process. The runtime Manager holds one leader elector, so each role
  gets its own Manager (own client for its writes, own elector); they share one probe/metrics
  server (the first Manager serves it, and its ``/readyz`` also requires every other Manager's
  caches to have synced) and one ``InformerFactory``: one informer, LIST/WATCH and store per
  kind for both roles (VSphereMachines and Providers, which both roles watch, are cached once;
  with 10,000 of each that halves the memory of those caches), on a client of its own that is
  closed after the Managers stopped. ``/metrics`` serves prometheus_client's process-wide registry, so every role's
  series appear there.

Signals: the first SIGTERM/SIGINT cancels every Manager, which drains its controllers (at most
``GRACEFUL_SHUTDOWN_TIMEOUT`` seconds), releases its Lease and closes its client; the exit code is
then 0. A second signal exits at once with 1 (controller-runtime ``SetupSignalHandler``). A
Manager that fails (leader election lost, caches not synced in time, a controller error) stops
the others and the process exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import structlog
from kubernetes_asyncio.client import Configuration

from banlieue.backends.base import Backend
from banlieue.options import Options, StartupError, parse_networks
from banlieue.reconcilers import kinds
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.metrics import Source, bind_source, informer_source
from banlieue.reconcilers.provider import controller as provider
from banlieue.reconcilers.virtualmachine import controller as virtualmachine
from banlieue.reconcilers.vmimage import controller as vmimage
from banlieue.reconcilers.vspherecluster import controller as vspherecluster
from banlieue.reconcilers.vspheremachine import controller as vspheremachine
from banlieue.reconcilers.vspheremachinetemplate import controller as vspheremachinetemplate
from banlieue.runtime.client import Client
from banlieue.runtime.config import KubeconfigError, Timeouts, load_config
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import ApiError
from banlieue.runtime.informer_factory import InformerFactory
from banlieue.runtime.manager import Manager
from banlieue.runtime.metrics_auth import MetricsTLSError

log = structlog.get_logger("banlieue.cmd.roles")

GRACEFUL_SHUTDOWN_TIMEOUT = 30.0
"""Seconds the controllers may take to finish in-flight reconciles after SIGTERM (cr default)."""
FIRST_CONTACT_TIMEOUT = 10.0
"""Seconds the startup ``GET /version`` may take before the process gives up (exit 1)."""


class Setup(Protocol):
    """A reconciler module's ``setup(mgr, ctx) -> Controller``."""

    def __call__(self, mgr: Manager, ctx: RoleContext) -> Controller: ...


@dataclass(frozen=True)
class RoleSpec:
    """One role of SPEC §4: its reconcilers' ``setup`` functions (named after their kinds),
    field manager, Lease name, and whether it talks to vSphere."""

    name: str
    setups: tuple[tuple[str, Setup], ...]
    field_manager: str
    lease: str
    backend: bool


CONTROLLER = RoleSpec(
    "controller",
    (("virtualmachine", virtualmachine.setup), ("vspherecluster", vspherecluster.setup)),
    kinds.FIELD_MANAGER_CONTROLLER, kinds.LEASE_CONTROLLER, backend=False,
)
PROVIDER_VSPHERE = RoleSpec(
    "provider-vsphere",
    (("provider", provider.setup), ("vmimage", vmimage.setup), ("vspheremachine", vspheremachine.setup),
     ("vspheremachinetemplate", vspheremachinetemplate.setup)),
    kinds.FIELD_MANAGER_PROVIDER_VSPHERE, kinds.LEASE_PROVIDER_VSPHERE, backend=True,
)
ROLE_SPECS: dict[str, tuple[RoleSpec, ...]] = {
    "controller": (CONTROLLER,),
    "provider-vsphere": (PROVIDER_VSPHERE,),
    "manager": (CONTROLLER, PROVIDER_VSPHERE),
}


def _server(cfg: Configuration) -> str:
    """The API server as ``scheme://host:port``: never user info or a query (no credentials)."""
    parts = urlsplit(str(cfg.host))
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"


def _has_any_config(kubeconfig: str | None) -> bool:
    """False when neither a kubeconfig, KUBECONFIG, in-cluster nor ~/.kube/config is there."""
    if kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("KUBECONFIG"):
        return True
    return os.path.isfile(os.path.expanduser("~/.kube/config"))


async def load_client_config(kubeconfig: str | None) -> Configuration:
    """The connection config (runtime ``load_config``); StartupError when unusable."""
    if not _has_any_config(kubeconfig):
        raise StartupError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod (in-cluster config)")
    try:
        return await load_config(kubeconfig)
    except KubeconfigError as err:
        # "<path>: file not found" / "...: not a kubeconfig file (...)": the path is in the message.
        raise StartupError(f"cannot load kubeconfig {err}") from None
    except Exception as err:  # any loader failure becomes the one-line StartupError
        # kubernetes_asyncio's messages name the file or the missing key, never a token.
        where = kubeconfig or "the in-cluster/KUBECONFIG configuration"
        raise StartupError(f"cannot load kubeconfig {where}: {type(err).__name__}: {err}") from None


async def first_contact(cfg: Configuration, timeout: float = FIRST_CONTACT_TIMEOUT) -> str:
    """``GET /version`` once, bounded by ``timeout`` seconds; returns the server's gitVersion.

    Raises StartupError (one line, the server URL without credentials) when the server does not
    answer, refuses the credentials, or answers with an error.
    """
    server = _server(cfg)
    # The client's own timeouts are longer than ``timeout``: the asyncio.timeout below fires
    # first, so silence reads "did not answer" and "unreachable" means refused or unresolvable.
    probe = Client(cfg, timeouts=Timeouts(connect=timeout + 1, request=timeout + 1), server_error_retries=0,
                   max_retry_after=0)
    try:
        async with asyncio.timeout(timeout):
            info = await probe.request("GET", "/version", timeout=timeout + 1)
    except TimeoutError:
        raise StartupError(f"API server {server} did not answer GET /version within {timeout:g} s") from None
    except ApiError as err:
        if err.status == 0:
            raise StartupError(f"API server {server} unreachable: {err.message}") from None
        if err.status in (401, 403):
            raise StartupError(f"API server {server} refused the credentials ({err.status} {err.reason})") from None
        raise StartupError(f"API server {server} answered GET /version with {err.status} {err.reason}") from None
    finally:
        await probe.close()
    return str(info.get("gitVersion") or "unknown")


def build_backend(options: Options) -> Backend:
    """The provider role's vSphere backend (``--vsphere-task-timeout`` seconds per task)."""
    from banlieue.backends.vsphere.backend import VSphereBackend

    allowed = parse_networks(options.allowed_endpoint_cidrs) if options.allowed_endpoint_cidrs else None
    return VSphereBackend(task_timeout=options.vsphere_task_timeout, allowed_networks=allowed)


@dataclass
class RoleRuntime:
    """One role's Manager and context, as built by :func:`build_managers`."""

    spec: RoleSpec
    manager: Manager
    context: RoleContext
    controllers: list[Controller]


def build_managers(
    specs: Sequence[RoleSpec], cfg: Configuration, options: Options, backend: Backend | None,
    informers: InformerFactory,
) -> list[RoleRuntime]:
    """One Manager per role, its reconcilers registered, all on the shared ``informers``
    (scoped to ``options.namespace``); the first Manager serves probes and metrics for all (the
    others get bind address "0", disabled)."""
    runtimes: list[RoleRuntime] = []
    for index, spec in enumerate(specs):
        client = Client(cfg)
        try:
            mgr = Manager(
                client,
                namespace=options.namespace,
                leader_election=options.leader_elect,
                leader_election_id=spec.lease,
                leader_election_namespace=options.leader_election_namespace,
                metrics_bind_address=options.metrics_bind_address if index == 0 else "0",
                health_probe_bind_address=options.health_probe_bind_address if index == 0 else "0",
                metrics_secure=options.metrics_secure,
                metrics_cert_dir=options.metrics_cert_dir,
                graceful_shutdown_timeout=GRACEFUL_SHUTDOWN_TIMEOUT,
                handle_signals=False,  # run_managers owns the signals: one handler for all Managers
                informers=informers,
            )
        except (MetricsTLSError, ValueError) as err:  # a bad --metrics-cert-dir, metrics on the probes' address
            raise StartupError(str(err)) from None
        ctx = RoleContext(
            client=client,
            cache=mgr.cache,
            recorder=mgr.get_event_recorder(spec.field_manager),
            field_manager=spec.field_manager,
            backend=backend if spec.backend else None,
            namespace=options.namespace,
            watch_filter=options.watch_filter,
            max_concurrent_reconciles=options.max_concurrent_reconciles,
            vsphere_task_timeout=options.vsphere_task_timeout,
            secret_resync_period=options.secret_resync_period,
            allow_http_endpoints=options.development_allow_http_endpoints,
        )
        controllers = [setup(mgr, ctx) for _, setup in spec.setups]
        runtimes.append(RoleRuntime(spec, mgr, ctx, controllers))
    first = runtimes[0].manager
    for other in runtimes[1:]:
        synced = other.manager.health.readyz_checks["informers-synced"]
        first.health.add_readyz_check(f"informers-synced-{other.spec.name}", synced)
    return runtimes


def _vm_source(mgr: Manager) -> Source:
    # A scrape decodes only the VirtualMachines whose resourceVersion changed since the last
    # one (decoding 10,000 at once raised the RSS by ~140 MiB per scrape).
    return informer_source(mgr.get_informer(kinds.VIRTUAL_MACHINE))


async def run_managers(managers: Sequence[Manager]) -> int:
    """Start every Manager; on SIGTERM/SIGINT stop them all and return 0; when one fails, stop
    the others and return 1 (StartupError for a port already in use)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.error("second signal: exiting without draining", signal=sig.name)
            os._exit(1)
        log.info("shutting down", signal=sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, on_signal, sig)
            signals.append(sig)
    tasks = [asyncio.create_task(m.start(), name=f"manager {i}") for i, m in enumerate(managers)]
    stopper = asyncio.create_task(stop.wait(), name="signal")
    try:
        await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for sig in signals:
            loop.remove_signal_handler(sig)
    failures = [r for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    for failure in failures:
        if isinstance(failure, OSError):
            raise StartupError(f"cannot serve probes/metrics: {failure.strerror or failure}") from None
    if failures:
        for failure in failures:
            log.error("manager failed", error=f"{type(failure).__name__}: {failure}")
        return 1
    if not stop.is_set():
        log.error("managers returned without a signal")
        return 1
    log.info("shutdown complete")
    return 0


async def run_role(role: str, options: Options) -> int:
    """Run ``role`` (``controller``, ``provider-vsphere`` or ``manager``) until SIGTERM/SIGINT.

    Returns 0 after a graceful shutdown, 1 when a Manager failed. Raises StartupError (one line,
    no credentials) when the role is unknown, the kubeconfig is unusable, the API server does
    not answer, or a listen port is taken.
    """
    specs = ROLE_SPECS.get(role)
    if specs is None:
        raise StartupError(f"unknown role {role!r} (one of {', '.join(ROLE_SPECS)})")
    cfg = await load_client_config(options.kubeconfig)
    version = await first_contact(cfg)
    log.info("starting", role=role, server=_server(cfg), server_version=version, namespace=options.namespace or "",
             watch_filter=options.watch_filter or "", leader_elect=options.leader_elect)
    backend = build_backend(options) if any(spec.backend for spec in specs) else None
    unbind: Callable[[], None] | None = None
    informers = InformerFactory(Client(cfg), namespace=options.namespace)
    try:
        runtimes = build_managers(specs, cfg, options, backend, informers)
        for runtime in runtimes:
            if runtime.spec is CONTROLLER:
                unbind = bind_source(_vm_source(runtime.manager))
        return await run_managers([r.manager for r in runtimes])
    finally:
        if unbind is not None:
            unbind()
        await informers.client.close()
        if backend is not None:
            await backend.close()
