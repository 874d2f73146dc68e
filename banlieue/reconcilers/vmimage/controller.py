"""VMImage reconciler (provider-vsphere role): gather -> ``vmimage.decide.decide`` -> execute.

Gather: the VMImage and every Provider from the cache; for each target Provider
(``vmimage.decide.targets``) build its Connection (cache reads) and call
``backend.find_template`` once per known datacenter; Providers are looked up concurrently
(one task each in a TaskGroup; calls to one vCenter never wait for another), each within
``LOOKUP_DEADLINE_SECONDS`` so a silent vCenter delays no other Provider's row. Paused Providers
are still looked up: a read changes nothing on the vCenter. Execute: server-side apply of the
VMImage's status (counts only) when it changed and an Event on Ready transitions (neither with
``--namespace``: ``VMImageReconciler.execute``); then each
Provider's own row in ``Provider.status.images`` (issue 23: a cluster-scoped object names no
tenant's Provider), written under the field manager ``<role>-vmimage`` so the Provider
controller's own status applies never remove it; requeue after
``vmimage.decide.REFRESH_SECONDS`` (templates appear without notification). A deleted VMImage's
rows are removed from every Provider.

Row writes: a Provider's ``status.images`` list is owned by this one field manager, so each write
applies the whole list — read by a direct GET and sent with its ``resourceVersion`` (a
concurrent write of another image's row or of the Provider controller gives 409 Conflict and the
write is redone on a fresh GET); writes to one Provider are serialised in this process by a
lock. A row that is already as desired in the cache costs no request.

Watches: Provider -> every VMImage, for Provider creation/deletion and for updates that change
what a lookup depends on (generation, the set of datacenters in its failure domains, the status
of its Ready condition) — not for capacity-only status updates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import structlog
from pydantic import ValidationError

from banlieue.api.provider import Provider, ProviderImageStatus
from banlieue.api.vmimage import VMImage
from banlieue.backends.base import BackendError, TemplateInfo, Transient, taxonomy
from banlieue.reconcilers.answers import answered_in_time
from banlieue.reconcilers.connection import ConnectionConfigError, connection_for
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import PROVIDER, PROVIDER_CLASS_VSPHERE, VM_IMAGE
from banlieue.reconcilers.referenced import referenced
from banlieue.reconcilers.vmimage.decide import Lookup, Plan, Snapshot, Target, decide, merged_rows, targets
from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import Conflict, NotFound
from banlieue.runtime.event import Object
from banlieue.runtime.manager import Manager
from banlieue.runtime.predicate import GenerationChangedPredicate, Predicate
from banlieue.runtime.reconcile import Request, Result, TerminalError

log = structlog.get_logger("banlieue.reconcilers.vmimage.controller")


def _providers(objs: Iterable[Object]) -> tuple[Provider, ...]:
    out: list[Provider] = []
    for obj in objs:
        try:
            out.append(Provider.model_validate(obj))
        except ValidationError:
            log.warning("skipping a Provider that does not match the schema", provider=obj["metadata"].get("name"))
    return tuple(out)


def _lookup_inputs(obj: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a VMImage lookup depends on in a Provider object (see ProviderLookupChanged)."""
    status = obj.get("status") or {}
    dcs = sorted(
        {
            str(((fd.get("attributes") or {}).get("raw") or {}).get("datacenter") or "")
            for fd in status.get("failureDomains") or []
        }
    )
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return ((obj.get("metadata") or {}).get("generation"), tuple(dcs), ready)


LOOKUP_DEADLINE_SECONDS = 15.0
"""Longest one Provider's template lookup may go unanswered while its vCenter answers nothing
else before its row reports ``ConnectFailed`` (seconds); the other Providers' rows are written
without waiting for it."""
LOOKUP_BUSY_LIMIT_SECONDS = 300.0
"""Longest a lookup may wait its turn behind requests its vCenter answers (seconds)."""


class ProviderLookupChanged(Predicate):
    """Passes Provider updates that change a VMImage lookup: generation, datacenters of the
    failure domains, or the Ready condition's status (create/delete/generic pass)."""

    def update(self, old: Object, new: Object) -> bool:
        return _lookup_inputs(old) != _lookup_inputs(new)


ROW_WRITE_ATTEMPTS = 5
"""Conflicting ``status.images`` writes retried on a fresh GET before the reconcile fails (and
is retried with back-off)."""


class VMImageReconciler:
    """Reconciles one VMImage per request (see module docstring)."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx
        self.rows_field_manager = f"{ctx.field_manager}-vmimage"
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def _lookup(self, provider: Provider, target: Target) -> Lookup:
        backend = self.ctx.backend
        if backend is None:
            return Lookup(backend_error=("NoBackend", "this role has no vSphere backend"))
        await referenced(self.ctx.cache).fetch_provider(self.ctx.client, provider)
        try:
            conn = connection_for(provider, self.ctx.cache)
        except ConnectionConfigError as err:
            log.info("vmimage lookup: connection not usable", provider=f"{provider.metadata.namespace}/{provider.metadata.name}",
                     reason=err.reason, error=err.message)
            return Lookup(config_error=(err.reason, err.message))
        found: list[tuple[str | None, TemplateInfo | None]] = []

        async def look_up() -> None:
            for dc in target.datacenters or (None,):
                found.append((dc, await backend.find_template(conn, dc, target.ref)))

        try:
            # One Provider's vCenter that accepts and never answers must not hold every other
            # Provider's row back (issue 23): the lookup has its own deadline, and the row says
            # so; the SOAP call left behind ends on the session's request timeout in that
            # vCenter's own thread pool. The deadline counts silence, not the wait behind
            # requests the vCenter answers meanwhile (a busy vCenter is not an unreachable one:
            # at a 10,000-VM cold start the lookup queued behind 10,000 VM reads).
            await answered_in_time(backend, conn, look_up(), LOOKUP_DEADLINE_SECONDS, LOOKUP_BUSY_LIMIT_SECONDS)
        except BackendError as err:
            # The detail (what answered on the endpoint) goes to the log only: the row says
            # "could not be reached" (issue 23 case 5).
            log.info("vmimage lookup failed", provider=f"{provider.metadata.namespace}/{provider.metadata.name}",
                     endpoint=conn.endpoint, reason=taxonomy(err), error=str(err))
            return Lookup(backend_error=(taxonomy(err), str(err)))
        except TimeoutError:
            log.info("vmimage lookup deadline passed", provider=f"{provider.metadata.namespace}/{provider.metadata.name}",
                     endpoint=conn.endpoint, deadline_seconds=LOOKUP_DEADLINE_SECONDS)
            return Lookup(backend_error=(Transient.__name__, f"vCenter did not answer within {LOOKUP_DEADLINE_SECONDS:g} s"))
        except Exception as err:
            # The lookups of all Providers run in one TaskGroup: an exception escaping one task
            # cancels the others and fails the whole VMImage (new-user finding: port 99999's
            # ValueError left every namespace's rows unwritten). Logged with its traceback.
            log.exception("vmimage lookup raised", provider=f"{provider.metadata.namespace}/{provider.metadata.name}")
            return Lookup(backend_error=("Internal", f"the lookup failed ({type(err).__name__}); the manager's log has the detail"))
        return Lookup(found=tuple(found))

    async def gather(self, image: VMImage) -> Snapshot:
        """The Snapshot of ``image``: Providers from the cache, lookups from the backend."""
        providers = _providers(self.ctx.cache.iter_objects(PROVIDER))
        by_key = {(p.metadata.namespace or "", p.metadata.name or ""): p for p in providers}
        wanted = targets(image, providers)
        tasks: dict[tuple[str, str], asyncio.Task[Lookup]] = {}
        async with asyncio.TaskGroup() as tg:
            for t in wanted:
                key = (t.namespace, t.name)
                tasks[key] = tg.create_task(self._lookup(by_key[key], t))
        return Snapshot(image, providers, self.ctx.now(), {k: task.result() for k, task in tasks.items()})

    async def execute(self, image: VMImage, plan: Plan) -> None:
        """Write the status (when changed) and record the plan's Events, then the Providers' rows.

        With ``--namespace`` (per-namespace mode) only the rows: the VMImage's counts would be
        those of one namespace's Providers written over the cluster-wide ones (and per-namespace
        managers would overwrite each other's), and an Event of a cluster-scoped object goes to
        namespace ``default``, outside the manager's Role (config/namespaced)."""
        if self.ctx.namespace is not None:
            await self.write_rows(image.metadata.name or "", plan.rows)
            return
        if plan.write_status:
            body = {
                "apiVersion": image.api_version,
                "kind": image.kind,
                "metadata": {"name": image.metadata.name},
                "status": plan.status.to_wire(),
            }
            await self.ctx.client.apply_status(VM_IMAGE, body, field_manager=self.ctx.field_manager)
        wire = image.to_wire()
        for type_, reason, message in plan.events:
            self.ctx.recorder.event(wire, type_, reason, message)
        await self.write_rows(image.metadata.name or "", plan.rows)

    async def write_rows(self, image_name: str, rows: Mapping[tuple[str, str], ProviderImageStatus | None]) -> None:
        """Make every vsphere Provider's ``status.images`` row of ``image_name`` equal ``rows``
        (absent or None: no row), dropping rows of VMImages that no longer exist."""
        existing = frozenset(str(o["metadata"]["name"]) for o in self.ctx.cache.list(VM_IMAGE))
        for p in _providers(self.ctx.cache.iter_objects(PROVIDER)):
            if p.spec.provider_class_ref.name != PROVIDER_CLASS_VSPHERE:
                continue
            key = (p.metadata.namespace or "", p.metadata.name or "")
            row = rows.get(key)
            if merged_rows(p.status.images if p.status else None, row, image_name, existing) is None:
                continue
            await self._write_row(key, image_name, row, existing)

    async def _write_row(
        self, key: tuple[str, str], image_name: str, row: ProviderImageStatus | None, existing: frozenset[str],
    ) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            for _ in range(ROW_WRITE_ATTEMPTS):
                try:
                    raw = await self.ctx.client.get(PROVIDER, key[1], key[0])
                except NotFound:
                    return
                current = Provider.model_validate(raw)
                rows = merged_rows(current.status.images if current.status else None, row, image_name, existing)
                if rows is None:
                    return
                body = {
                    "apiVersion": current.api_version,
                    "kind": current.kind,
                    "metadata": {"name": key[1], "namespace": key[0], "resourceVersion": raw["metadata"]["resourceVersion"]},
                    "status": {"images": [r.to_wire() for r in rows]},
                }
                try:
                    await self.ctx.client.apply_status(PROVIDER, body, field_manager=self.rows_field_manager)
                    return
                except Conflict:
                    continue
                except NotFound:
                    return
            raise Conflict(409, "Conflict", f"Provider {key[0]}/{key[1]}: status.images changed under {ROW_WRITE_ATTEMPTS} writes in a row")

    async def reconcile(self, request: Request) -> Result:
        """Gather -> decide -> execute; requeue after the refresh period."""
        raw = self.ctx.cache.get(VM_IMAGE, request.name)
        if raw is None:
            await self.write_rows(request.name, {})
            return Result()
        try:
            image = VMImage.model_validate(raw)
        except ValidationError as err:
            raise TerminalError(f"VMImage {request} does not match the schema: {err}") from err
        if image.metadata.deletion_timestamp is not None:
            return Result()
        plan = decide(await self.gather(image))
        try:
            await self.execute(image, plan)
        except NotFound:
            return Result()
        log.debug("reconciled", vmimage=request.name, rows=len(plan.rows), wrote=plan.write_status)
        return Result(requeue_after=plan.requeue_after)


def setup(mgr: Manager, ctx: RoleContext) -> Controller:
    """Register the ``vmimage`` controller: for VMImage (generation changes), watches Provider
    -> every VMImage (``ProviderLookupChanged``)."""
    referenced(ctx.cache).allow_http_endpoints = ctx.allow_http_endpoints

    def provider_to_images(obj: Object) -> list[Request]:
        return [Request("", n) for n in sorted(o["metadata"]["name"] for o in ctx.cache.list(VM_IMAGE))]

    return (
        ControllerBuilder(mgr)
        .named("vmimage")
        .for_(VM_IMAGE, predicates=[GenerationChangedPredicate()])
        .watches(PROVIDER, provider_to_images, predicates=[ProviderLookupChanged()])
        .with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles)
        .complete(VMImageReconciler(ctx))
    )
