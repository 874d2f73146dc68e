"""Provider reconciler (provider-vsphere role): gather -> ``provider.decide.decide`` -> execute.

Gather: the Provider from the cache; for a vsphere, unpaused Provider its ``Connection`` from
the credentials Secret and CA bundle (``connection.connection_for``, cache reads), then
``backend.check_connection`` and ``backend.inventory``; each failure is recorded with its stage
(config / connect / inventory) and the backend's reason, and decide maps it to the SPEC §2
reason. Execute: server-side apply of the full status on ``/status`` (field manager of the role,
force) when it changed, Events on Ready transitions, and the requeue decide asked for.

Secrets and ConfigMaps are never listed or watched: the gather GETs the referenced names
(``reconcilers.referenced``), and that store's ``changes()`` channel - every referenced object
re-read each ``--secret-resync-period`` - maps a changed one back to the Providers that reference
it through the indexes ``providerSecrets`` / ``providerConfigMaps`` (values
``<namespace>/<name>``), so fixing a Secret or rotating a CA recovers without a restart (SPEC §4
"Secrets -> Providers that use them"), within one resync period. The Provider itself is watched for generation changes only, so the controller's own
status writes do not trigger a new inventory walk; the periodic refresh is
``provider.decide.REFRESH_SECONDS`` (capacity changes are not notified by vCenter), and a machine
provisioned or deleted re-measures its Providers within seconds (``provider.remeasure``, debounced).

Deletion (``provider.deletion``): a vSphere Provider gets the finalizer ``banlieue.io/provider``
first; a deleting one keeps it while VSphereMachines of its namespace use it (``Ready`` False
``Deleting``) and drops it when none does. VSphereMachine events map to the deleting Providers
they use, so the last machine going away releases the Provider at once. Every Connection built
here is remembered (``last_connection``) for machine deletions after the Secret is gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar, cast

import structlog
from pydantic import ValidationError

from banlieue.api.provider import Provider, ProviderConditionReason
from banlieue.backends.base import BackendError, Connection, taxonomy
from banlieue.reconcilers.answers import answering
from banlieue.reconcilers.connection import (
    ConnectionConfigError,
    referenced_config_maps,
    referenced_secrets,
)
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    FINALIZER_PROVIDER,
    PROVIDER,
    PROVIDER_CLASS_VSPHERE,
    SECRET,
    VSPHERE_MACHINE,
)
from banlieue.reconcilers.last_connection import last_known, remembered_connection_for
from banlieue.reconcilers.provider.decide import Failure, Peer, Plan, Snapshot, capabilities_of, decide
from banlieue.reconcilers.provider.deletion import (
    DeletionPlan,
    decide_deletion,
    machine_uses_provider,
)
from banlieue.reconcilers.provider.reachability import (
    ReachabilityNotifier,
    SilenceReporter,
    reachability_requests,
)
from banlieue.reconcilers.provider.release import EndpointJanitor, EndpointReleaser
from banlieue.reconcilers.provider.remeasure import Remeasure
from banlieue.reconcilers.referenced import referenced
from banlieue.reconcilers.refused import hear_refusals
from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import NotFound
from banlieue.runtime.event import Object
from banlieue.runtime.handler import MapFunc
from banlieue.runtime.manager import Manager
from banlieue.runtime.predicate import GenerationChangedPredicate
from banlieue.runtime.reconcile import Request, Result, TerminalError

log = structlog.get_logger("banlieue.reconcilers.provider.controller")
T = TypeVar("T")

INSECURE_SKIP_TLS_VERIFY = "InsecureSkipTLSVerify"
"""Warning Event reason on a Provider that skips TLS verification (docs/security.md)."""
SECRETS_INDEX = "providerSecrets"
"""Provider index: ``<namespace>/<name>`` of every Secret it reads (credentials, CA secretRef)."""
CONFIG_MAPS_INDEX = "providerConfigMaps"
"""Provider index: ``<namespace>/<name>`` of the ConfigMap its CA bundle comes from."""
VCENTER_INDEX = "providerVCenter"
"""Provider index: the recorded ``status.vcenter.instanceUUID`` (ADR 0013)."""


def _parse(obj: Object) -> Provider | None:
    try:
        return Provider.model_validate(obj)
    except ValidationError:
        return None


def secrets_index(obj: Object) -> list[str]:
    """Index function: ``<namespace>/<secret>`` for each Secret the Provider reads."""
    p = _parse(obj)
    return [f"{p.metadata.namespace}/{n}" for n in referenced_secrets(p)] if p is not None else []


def recorded_vcenter(obj: Object) -> str | None:
    """``status.vcenter.instanceUUID`` of a Provider wire object, or None."""
    status = obj.get("status") or {}
    value = (status.get("vcenter") or {}).get("instanceUUID") if isinstance(status, dict) else None
    return str(value) if value else None


def vcenter_index(obj: Object) -> list[str]:
    """Index function: the instance UUID of the vCenter the Provider recorded (none: [])."""
    uuid = recorded_vcenter(obj)
    return [uuid] if uuid else []


def config_maps_index(obj: Object) -> list[str]:
    """Index function: ``<namespace>/<configmap>`` of the Provider's CA ConfigMap."""
    p = _parse(obj)
    return [f"{p.metadata.namespace}/{n}" for n in referenced_config_maps(p)] if p is not None else []


SILENCE_POLL_SECONDS = 0.5
"""How often a Provider's own vCenter call in flight looks at the reachability probe."""

CONTACT_WAIT_SECONDS = 10.0
"""Longest a reconcile waits for a Provider's first call (login and ``about``) before it frees
its worker and reports ``ConnectFailed`` (seconds); the call goes on in the endpoint's own
thread pool and a later reconcile takes its answer without waiting again. An endpoint that
accepts TCP and never answers held a worker for the request timeout twice per attempt (240 s
with the default 120 s), so a tenant's few such Providers stalled every Provider's status
(issue 23 case 4, found by a new-user pass)."""

CONTACT_RECHECK_SECONDS = 5.0
"""How soon a Provider whose first call is still unanswered is looked at again (seconds)."""

BUSY_WAIT_LIMIT_SECONDS = 300.0
"""Longest a Provider's first call may wait its turn behind requests its vCenter answers
(``reconcilers.answers.answering``) with the status left as it is (seconds); past it the call is
reported unanswered like one to a silent vCenter."""


class _Unanswered(Exception):
    """The Provider's first call has not answered within ``CONTACT_WAIT_SECONDS``."""

    def __init__(self, waited: float) -> None:
        super().__init__(waited)
        self.waited = waited


@dataclass
class _Contact:
    """A Provider's first call in flight: for ``conn`` (another connection is another call)."""

    conn: Connection
    task: asyncio.Future[Any]
    started: float


class _Silent(Exception):
    """The vCenter stopped answering its probe while a call of this reconcile was in flight."""

    def __init__(self, since: float) -> None:
        super().__init__(since)
        self.since = since


async def _unless_silent(backend: object, conn: Connection, call: Coroutine[Any, Any, T]) -> T:
    """``await call``, unless the reachability probe says the vCenter stopped answering first:
    then raise _Silent. A call sent just before a vCenter hung waits for the request timeout
    (120 s), during which the Provider stayed ``ProviderReachable`` True and the scheduler kept
    placing VMs there (issue 21, seen on ``banlieue dev`` with a SIGSTOPped simulator while a
    re-measure ran). The pool thread still waits for its answer; this reconcile does not."""
    task = asyncio.ensure_future(call)
    if not isinstance(backend, SilenceReporter):
        return await task
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=SILENCE_POLL_SECONDS)
            if done:
                return task.result()
            silent = backend.unreachable_since(conn)
            if silent is not None:
                raise _Silent(silent)
    finally:
        if not task.done():
            task.cancel()


def _retrieve(task: asyncio.Future[Any]) -> None:
    # A call dropped before its answer was taken (the Provider edited or deleted): its error is
    # expected, not an "exception was never retrieved" warning.
    if not task.cancelled():
        task.exception()


def _silent_snapshot(provider: Provider, now: datetime, silent: float) -> Snapshot:
    # Hung, not refusing: a request would wait for the request timeout (minutes).
    since = datetime.fromtimestamp(silent, tz=UTC)
    message = f"vCenter has not answered since {since.strftime('%Y-%m-%dT%H:%M:%SZ')} (CurrentTime probe)"
    return Snapshot(provider, now, failure=Failure("connect", "Transient", message), unreachable_since=since)


def _identity_refused(raw: Object) -> bool:
    """Whether a Provider wire object is ``Ready`` False ``VCenterIdentityChanged``."""
    for c in (raw.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return bool(c.get("reason") == ProviderConditionReason.VCENTER_IDENTITY_CHANGED)
    return False


class ProviderReconciler:
    """Reconciles one Provider per request (see module docstring)."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self._contacts: dict[tuple[str, str], _Contact] = {}

    async def _first_contact(self, provider: Provider, conn: Connection, call: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """``await call()`` for ``provider``'s ``conn`` without holding the worker longer than
        ``CONTACT_WAIT_SECONDS`` (raises _Unanswered); a call already in flight for the same
        connection is looked at, not sent again, and a finished one's result (or BackendError /
        _Silent) is returned once."""
        key = (provider.metadata.namespace or "", provider.metadata.name or "")
        contact = self._contacts.get(key)
        wait = 0.0
        if contact is None or contact.conn != conn:
            # (A call for an edited connection is dropped: its answer is not this endpoint's.)
            contact = _Contact(conn, asyncio.ensure_future(call()), time.monotonic())
            contact.task.add_done_callback(_retrieve)
            self._contacts[key] = contact
            wait = CONTACT_WAIT_SECONDS
        if not contact.task.done():
            await asyncio.wait({contact.task}, timeout=wait)
        if not contact.task.done():
            raise _Unanswered(time.monotonic() - contact.started)
        del self._contacts[key]
        return cast("T", contact.task.result())

    def forget_contact(self, provider: Provider) -> None:
        """Drop ``provider``'s call in flight (it is being deleted)."""
        self._contacts.pop((provider.metadata.namespace or "", provider.metadata.name or ""), None)

    async def gather(self, provider: Provider) -> Snapshot:
        """The Snapshot of ``provider``: nothing is read from the backend when the class is not
        vsphere or the Provider is paused. Raises only what the backend raises outside its
        taxonomy (a bug: the controller retries with back-off)."""
        now = self.ctx.now()
        if provider.spec.provider_class_ref.name != PROVIDER_CLASS_VSPHERE or provider.spec.paused:
            return Snapshot(provider, now)
        backend = self.ctx.backend
        if backend is None:
            return Snapshot(provider, now, failure=Failure("connect", "NoBackend", "this role has no vSphere backend"))
        await referenced(self.ctx.cache).fetch_provider(self.ctx.client, provider)
        try:
            conn = remembered_connection_for(provider, self.ctx.cache)
        except ConnectionConfigError as err:
            return Snapshot(provider, now, failure=Failure("config", err.reason, err.message, err.detail))
        silent = backend.unreachable_since(conn) if isinstance(backend, SilenceReporter) else None
        if silent is not None:
            return _silent_snapshot(provider, now, silent)
        # The Provider's own calls learn who answers: they are not refused when it is another
        # vCenter than the recorded one (decide compares them); its machines' calls are.
        probe = replace(conn, vcenter_instance_uuid=None)
        try:
            about = await self._first_contact(provider, conn, lambda: _unless_silent(backend, conn, backend.about(probe)))
        except _Unanswered as quiet:
            if quiet.waited < BUSY_WAIT_LIMIT_SECONDS and answering(backend, conn, CONTACT_WAIT_SECONDS):
                # Busy, not silent: the call waits behind requests the vCenter answers.
                log.debug("provider connection waits its turn", provider=f"{provider.metadata.namespace}/{provider.metadata.name}",
                          endpoint=conn.endpoint, waited_seconds=round(quiet.waited, 1))
                return Snapshot(provider, now, busy=True, recheck_after=CONTACT_RECHECK_SECONDS)
            log.info("provider connection unanswered", provider=f"{provider.metadata.namespace}/{provider.metadata.name}",
                     endpoint=conn.endpoint, waited_seconds=round(quiet.waited, 1))
            message = f"vCenter did not answer within {quiet.waited:.0f} s"
            return Snapshot(provider, now, failure=Failure("connect", "Transient", message), recheck_after=CONTACT_RECHECK_SECONDS)
        except _Silent as quiet:
            return _silent_snapshot(provider, now, quiet.since)
        except BackendError as err:
            return Snapshot(provider, now, failure=Failure("connect", taxonomy(err), str(err)))
        version = about.api_version
        recorded = provider.status.vcenter if provider.status is not None else None
        users = tuple(self.users(provider)) if recorded is not None and recorded.instance_uuid != about.instance_uuid else ()
        same = self.same_vcenter(provider, about.instance_uuid)
        try:
            inventory = await _unless_silent(backend, conn, backend.inventory(probe, capabilities_of(provider)))
        except _Silent as quiet:
            return _silent_snapshot(provider, now, quiet.since)
        except BackendError as err:
            return Snapshot(provider, now, failure=Failure("inventory", taxonomy(err), str(err)), api_version=version,
                            vcenter=about, users=users, same_vcenter=same)
        return Snapshot(provider, now, inventory=inventory, api_version=version, vcenter=about, users=users, same_vcenter=same)

    def same_vcenter(self, provider: Provider, instance_uuid: str) -> tuple[Peer, ...]:
        """The other Providers (any namespace, not being deleted) that recorded ``instance_uuid``."""
        out: list[Peer] = []
        for raw in self.ctx.cache.by_index(PROVIDER, VCENTER_INDEX, instance_uuid):
            meta = raw.get("metadata") or {}
            if (meta.get("namespace"), meta.get("name")) == (provider.metadata.namespace, provider.metadata.name):
                continue
            if meta.get("deletionTimestamp"):
                continue
            other = _parse(raw)
            if other is not None:
                out.append(Peer(other.metadata.namespace or "", other.metadata.name or "", other.metadata.creation_timestamp))
        return tuple(sorted(out, key=lambda p: (p.namespace, p.name)))

    async def execute(self, provider: Provider, plan: Plan) -> None:
        """Write the status (when changed) and record the plan's Events."""
        if plan.write_status:
            body = {
                "apiVersion": provider.api_version,
                "kind": provider.kind,
                "metadata": {"name": provider.metadata.name, "namespace": provider.metadata.namespace},
                "status": plan.status.to_wire(),
            }
            await self.ctx.client.apply_status(PROVIDER, body, field_manager=self.ctx.field_manager)
        wire = provider.to_wire()
        for event in plan.events:
            self.ctx.recorder.event(wire, event.type, event.reason, event.message)

    def users(self, provider: Provider) -> list[str]:
        """Sorted names of the VSphereMachines (cache) that use ``provider``. Goes through the
        namespace's machines one decoded object at a time (``Cache.iter_objects``): decoding
        10,000 at once raised the manager's RSS by ~140 MiB."""
        machines = self.ctx.cache.iter_objects(VSPHERE_MACHINE, provider.metadata.namespace)
        return sorted(str(m["metadata"]["name"]) for m in machines if machine_uses_provider(m, provider))

    async def reconcile_delete(self, raw: Object, provider: Provider) -> Result:
        """A deleting Provider: keep the finalizer while machines use it, else drop it."""
        self.forget_contact(provider)
        plan: DeletionPlan = decide_deletion(provider, self.users(provider), self.ctx.now())
        try:
            if plan.write_status:
                await self.execute(provider, Plan(status=plan.status, write_status=True))
            for event in plan.events:
                self.ctx.recorder.event(provider.to_wire(), event.type, event.reason, event.message)
            if plan.remove_finalizer:
                await self.ctx.client.remove_finalizer(PROVIDER, raw, FINALIZER_PROVIDER)
                last_known(self.ctx.cache).forget(f"{provider.metadata.namespace}/{provider.metadata.name}")
                log.info("provider released", provider=f"{provider.metadata.namespace}/{provider.metadata.name}")
        except NotFound:
            return Result()
        return Result(requeue_after=plan.requeue_after)

    async def reconcile(self, request: Request) -> Result:
        """Gather -> decide -> execute; the Result carries decide's requeue."""
        raw = self.ctx.cache.get(PROVIDER, request.name, request.namespace)
        if raw is None:
            return Result()
        provider = _parse(raw)
        if provider is None:
            raise TerminalError(f"Provider {request} does not match the schema")
        if provider.metadata.deletion_timestamp is not None:
            return await self.reconcile_delete(raw, provider)
        if provider.spec.provider_class_ref.name == PROVIDER_CLASS_VSPHERE and FINALIZER_PROVIDER not in (provider.metadata.finalizers or ()):
            try:
                raw = await self.ctx.client.add_finalizer(PROVIDER, raw, FINALIZER_PROVIDER)
            except NotFound:
                return Result()
            provider = _parse(raw) or provider
        snap = await self.gather(provider)
        if snap.failure is not None:
            # The detail stays here (issue 23 cases 5 and 8): the condition's message is generic.
            log.info("provider connection failed", provider=str(request), endpoint=provider.spec.connection.endpoint,
                     stage=snap.failure.stage, reason=snap.failure.reason, error=snap.failure.detail or snap.failure.message)
        plan = decide(snap)
        try:
            await self.execute(provider, plan)
        except NotFound:
            return Result()  # deleted meanwhile
        if provider.spec.connection.insecure_skip_tls_verify and plan.write_status:
            # Whoever answers on the endpoint gets the credentials: say so where the namespace's
            # users look (issue 23). On status changes only; the recorder counts repeats.
            self.ctx.recorder.event(
                provider.to_wire(), "Warning", INSECURE_SKIP_TLS_VERIFY,
                "spec.connection.insecureSkipTLSVerify is set: the vCenter's certificate is not verified, so the "
                "credentials go to whoever answers on the endpoint; set spec.connection.caBundle instead",
            )
        ready = next((c for c in plan.status.conditions or [] if c.type == "Ready"), None)
        log.debug(
            "reconciled",
            provider=str(request),
            ready=ready.status if ready else None,
            reason=ready.reason if ready else None,
            failure_domains=len(plan.status.failure_domains or []),
            wrote=plan.write_status,
        )
        return Result(requeue=plan.requeue, requeue_after=plan.requeue_after)


def setup(mgr: Manager, ctx: RoleContext) -> Controller:
    """Register the ``provider`` controller: for Provider (generation changes), watches Secret
    and ConfigMap -> the Providers that reference them (indexes ``providerSecrets``,
    ``providerConfigMaps``), VSphereMachine -> the deleting Providers it uses, and the backend's
    reachability transitions -> the Providers on that vCenter (``provider.reachability``); and the
    ``provider.release.EndpointJanitor`` that releases endpoints no Provider uses."""
    referenced(ctx.cache).allow_http_endpoints = ctx.allow_http_endpoints
    ctx.cache.add_indexer(PROVIDER, SECRETS_INDEX, secrets_index)
    ctx.cache.add_indexer(PROVIDER, CONFIG_MAPS_INDEX, config_maps_index)
    ctx.cache.add_indexer(PROVIDER, VCENTER_INDEX, vcenter_index)

    def by_index(index: str) -> MapFunc:
        def map_fn(obj: Object) -> list[Request]:
            meta = obj["metadata"]
            key = f"{meta.get('namespace') or ''}/{meta['name']}"
            return sorted(
                {Request(p["metadata"].get("namespace") or "", p["metadata"]["name"]) for p in ctx.cache.by_index(PROVIDER, index, key)},
                key=lambda r: (r.namespace, r.name),
            )

        return map_fn

    def machine_map(obj: Object) -> list[Request]:
        # Only deleting Providers and those refusing another vCenter for their machines care
        # about machines (an inventory walk per machine event would be waste): the one(s) this
        # machine uses get re-checked when it changes or goes.
        ns = (obj.get("metadata") or {}).get("namespace")
        out: list[Request] = []
        for raw in ctx.cache.list(PROVIDER, ns):
            if not (raw.get("metadata") or {}).get("deletionTimestamp") and not _identity_refused(raw):
                continue
            p = _parse(raw)
            if p is not None and machine_uses_provider(obj, p):
                out.append(Request(p.metadata.namespace or "", p.metadata.name or ""))
        return out

    def same_vcenter_map(obj: Object) -> list[Request]:
        # A Provider that recorded a vCenter (or went): the others on it re-check VCenterUnique.
        uuid = recorded_vcenter(obj)
        if uuid is None:
            return []
        meta = obj.get("metadata") or {}
        me = (meta.get("namespace") or "", meta.get("name"))
        return sorted(
            {Request(p["metadata"].get("namespace") or "", p["metadata"]["name"]) for p in ctx.cache.by_index(PROVIDER, VCENTER_INDEX, uuid)
             if (p["metadata"].get("namespace") or "", p["metadata"]["name"]) != me},
            key=lambda r: (r.namespace, r.name),
        )

    secret_map = by_index(SECRETS_INDEX)
    config_map_map = by_index(CONFIG_MAPS_INDEX)

    def referenced_map(obj: Object) -> Iterable[Request]:
        return secret_map(obj) if obj.get("kind") == SECRET.kind else config_map_map(obj)

    builder = (
        ControllerBuilder(mgr)
        .named("provider")
        .for_(PROVIDER, predicates=[GenerationChangedPredicate()])
        .watches_channel(referenced(ctx.cache).changes(ctx.client, ctx.secret_resync_period), referenced_map)
        .watches(VSPHERE_MACHINE, machine_map)
        .watches(PROVIDER, same_vcenter_map)
    )
    # A machine provisioned or deleted: re-measure its Providers' capacity a few seconds later
    # (debounced), not at the next 300 s refresh (provider.remeasure).
    remeasure = Remeasure(ctx.cache)
    mgr.get_informer(VSPHERE_MACHINE).add_event_handler(remeasure)
    builder = builder.watches_channel(remeasure.requests())
    if isinstance(ctx.backend, EndpointReleaser):
        # Endpoints no Provider uses any more give their threads, caches and metric series
        # back (issue 23 case 6; provider.release).
        janitor = EndpointJanitor(ctx, ctx.backend)
        mgr.get_informer(PROVIDER).add_event_handler(janitor)
        mgr.add(janitor)
    # vCenter refused a Provider's credentials: re-read its Secret now (a rotated password),
    # not at the next --secret-resync-period (reconcilers.refused).
    hear_refusals(mgr, ctx)
    if isinstance(ctx.backend, ReachabilityNotifier):
        # A vCenter that stops or starts answering: re-check its Providers now, not at the next
        # refresh (provider.reachability).
        builder = builder.watches_channel(reachability_requests(ctx.backend, ctx.cache))
    return builder.with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles).complete(ProviderReconciler(ctx))
