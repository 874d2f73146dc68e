"""VMImage reconciler (provider-vsphere role): gather -> ``vmimage.decide.decide`` -> execute.

Gather: the VMImage and every Provider from the cache; for each target Provider
(``vmimage.decide.targets``) build its Connection (cache reads) and call
``backend.find_template`` once per known datacenter; Providers are looked up concurrently
(one task each in a TaskGroup; calls to one vCenter never wait for another). Paused Providers
are still looked up: a read changes nothing on the vCenter. Execute: server-side apply of the
full status when it changed; an Event on Ready transitions; requeue after
``vmimage.decide.REFRESH_SECONDS`` (templates appear without notification).

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

from banlieue.api.provider import Provider
from banlieue.api.vmimage import VMImage
from banlieue.backends.base import BackendError, TemplateInfo, taxonomy
from banlieue.reconcilers.connection import ConnectionConfigError, connection_for
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import CONFIG_MAP, PROVIDER, SECRET, VM_IMAGE
from banlieue.reconcilers.vmimage.decide import Lookup, Plan, Snapshot, Target, decide, targets
from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import NotFound
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


class ProviderLookupChanged(Predicate):
    """Passes Provider updates that change a VMImage lookup: generation, datacenters of the
    failure domains, or the Ready condition's status (create/delete/generic pass)."""

    def update(self, old: Object, new: Object) -> bool:
        return _lookup_inputs(old) != _lookup_inputs(new)


class VMImageReconciler:
    """Reconciles one VMImage per request (see module docstring)."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx

    async def _lookup(self, provider: Provider, target: Target) -> Lookup:
        backend = self.ctx.backend
        if backend is None:
            return Lookup(backend_error=("NoBackend", "this role has no vSphere backend"))
        try:
            conn = connection_for(provider, self.ctx.cache)
        except ConnectionConfigError as err:
            return Lookup(config_error=(err.reason, err.message))
        found: list[tuple[str | None, TemplateInfo | None]] = []
        try:
            for dc in target.datacenters or (None,):
                found.append((dc, await backend.find_template(conn, dc, target.ref)))
        except BackendError as err:
            return Lookup(backend_error=(taxonomy(err), str(err)))
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
        """Write the status (when changed) and record the plan's Events."""
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

    async def reconcile(self, request: Request) -> Result:
        """Gather -> decide -> execute; requeue after the refresh period."""
        raw = self.ctx.cache.get(VM_IMAGE, request.name)
        if raw is None:
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
        log.debug("reconciled", vmimage=request.name, rows=len(plan.status.per_provider or []), wrote=plan.write_status)
        return Result(requeue_after=plan.requeue_after)


def setup(mgr: Manager, ctx: RoleContext) -> Controller:
    """Register the ``vmimage`` controller: for VMImage (generation changes), watches Provider
    -> every VMImage (``ProviderLookupChanged``)."""

    # connection_for reads Secrets and ConfigMaps from the cache: make sure their informers
    # exist before the manager starts (so they are synced when the first reconcile runs).
    mgr.get_informer(SECRET)
    mgr.get_informer(CONFIG_MAP)

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
