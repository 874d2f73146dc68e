"""VSphereMachineTemplate reconciler: ``status.capacity`` and ``status.nodeInfo`` (SPEC §3).

CAPI autoscaling from zero (cluster-autoscaler's clusterapi provider) reads
``status.capacity{cpu, memory}`` and ``status.nodeInfo{architecture, operatingSystem}`` of the
InfraMachineTemplate. Rules (*decision* where the SPEC is silent):

- ``capacity.cpu`` = ``spec.template.spec.numCPUs`` as a quantity string (``"2"``);
  ``capacity.memory`` = ``"<memoryMiB>Mi"``. Always strings, as Go serialises a
  ``resource.Quantity``: the cluster autoscaler reads the map with ``unstructured.NestedStringMap``
  (``clusterapi_unstructured.go``, ``resourceCapacityFromInfrastructureObject``), which fails on a
  JSON number and then ignores the whole capacity (no scale from zero). A field that is not set
  is left out (the autoscaler then cannot scale that template from zero; the template's VM
  values are unknown without a backend call).
- ``nodeInfo``: the template names only a vSphere template (``spec.template.spec.template``);
  *decision*: the VMImages whose ``providerClass: vsphere`` source refers to that template name
  decide it: ``architecture`` = the image's ``spec.architecture``, ``operatingSystem`` = its
  ``osFamily`` when that is ``linux`` or ``windows`` (case-insensitive), else ``linux``. Without a
  matching VMImage: ``amd64``/``linux`` (the autoscaler's own defaults). Several matching
  VMImages: the first by name.
- No backend is needed; no conditions (the CRD's status has none). Re-reconciled when a
  VMImage changes (index ``vsphereTemplate`` on the template name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog
from pydantic import ValidationError

from banlieue.api.infrastructure import (
    NodeArchitecture,
    NodeInfo,
    NodeOperatingSystem,
    VSphereMachineTemplate,
    VSphereMachineTemplateStatus,
)
from banlieue.api.vmimage import VMImage
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import PROVIDER_CLASS_VSPHERE, VM_IMAGE, VSPHERE_MACHINE_TEMPLATE
from banlieue.reconcilers.vmimage.decide import source_ref
from banlieue.runtime.builder import ControllerBuilder
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import NotFound
from banlieue.runtime.event import Object
from banlieue.runtime.manager import Manager
from banlieue.runtime.predicate import GenerationChangedPredicate, Predicate, and_, watch_filter_predicate
from banlieue.runtime.reconcile import Request, Result, TerminalError

log = structlog.get_logger("banlieue.reconcilers.vspheremachinetemplate.controller")

TEMPLATE_INDEX = "vsphereTemplate"
"""VSphereMachineTemplate index: ``spec.template.spec.template`` (the vSphere template name)."""


@dataclass(frozen=True)
class Snapshot:
    """The template and every VMImage (cache)."""

    template: VSphereMachineTemplate
    images: tuple[VMImage, ...]


@dataclass(frozen=True)
class Plan:
    """``status``: the full desired status; ``write_status`` False when unchanged."""

    status: VSphereMachineTemplateStatus
    write_status: bool


def _image_for(template_name: str | None, images: tuple[VMImage, ...]) -> VMImage | None:
    if not template_name:
        return None
    for img in sorted(images, key=lambda i: i.metadata.name or ""):
        if source_ref(img) == template_name:
            return img
    return None


def decide(snap: Snapshot) -> Plan:
    """The Plan for ``snap`` (module docstring rules). Never raises."""
    spec = snap.template.spec.template.spec
    capacity: dict[str, int | str] = {}
    if spec.num_cpus is not None:
        capacity["cpu"] = str(spec.num_cpus)
    if spec.memory_mib is not None:
        capacity["memory"] = f"{spec.memory_mib}Mi"
    arch, os_ = NodeArchitecture.AMD64, NodeOperatingSystem.LINUX
    image = _image_for(spec.template, snap.images)
    if image is not None:
        arch = NodeArchitecture(image.spec.architecture.value)
        family = (image.spec.os_family or "").lower()
        if family in (NodeOperatingSystem.LINUX.value, NodeOperatingSystem.WINDOWS.value):
            os_ = NodeOperatingSystem(family)
    status = VSphereMachineTemplateStatus(
        capacity=capacity or None, node_info=NodeInfo(architecture=arch, operating_system=os_)
    )
    current = snap.template.status or VSphereMachineTemplateStatus()
    return Plan(status=status, write_status=status.to_wire() != current.to_wire())


def template_index(obj: Object) -> list[str]:
    """Index function: the vSphere template name of a VSphereMachineTemplate ([] when unset)."""
    name = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("template")
    return [str(name)] if name else []


def _images(objs: Iterable[Object]) -> list[VMImage]:
    out: list[VMImage] = []
    for obj in objs:
        try:
            out.append(VMImage.model_validate(obj))
        except ValidationError:
            log.warning("skipping a VMImage that does not match the schema", vmimage=obj["metadata"].get("name"))
    return out


class VSphereMachineTemplateReconciler:
    """Writes ``status.capacity`` / ``status.nodeInfo`` with server-side apply."""

    def __init__(self, ctx: RoleContext) -> None:
        self.ctx = ctx

    async def reconcile(self, request: Request) -> Result:
        """Gather (cache) -> decide -> apply status when it changed."""
        raw = self.ctx.cache.get(VSPHERE_MACHINE_TEMPLATE, request.name, request.namespace)
        if raw is None:
            return Result()
        try:
            template = VSphereMachineTemplate.model_validate(raw)
        except ValidationError as err:
            raise TerminalError(f"VSphereMachineTemplate {request} does not match the schema: {err}") from err
        images = tuple(_images(self.ctx.cache.iter_objects(VM_IMAGE)))
        plan = decide(Snapshot(template, images))
        if plan.write_status:
            body = {
                "apiVersion": template.api_version,
                "kind": template.kind,
                "metadata": {"name": request.name, "namespace": request.namespace},
                "status": plan.status.to_wire(),
            }
            try:
                await self.ctx.client.apply_status(VSPHERE_MACHINE_TEMPLATE, body, field_manager=self.ctx.field_manager)
            except NotFound:
                return Result()  # deleted since the cache read
            log.info("status written", vspheremachinetemplate=str(request), capacity=plan.status.capacity)
        return Result()


def setup(mgr: Manager, ctx: RoleContext) -> Controller:
    """Register the ``vspheremachinetemplate`` controller: for VSphereMachineTemplate
    (generation changes; ``--watch-filter`` label when set), watches VMImage -> the templates
    indexed under each of its vSphere source refs."""
    ctx.cache.add_indexer(VSPHERE_MACHINE_TEMPLATE, TEMPLATE_INDEX, template_index)

    def image_to_templates(obj: Object) -> list[Request]:
        refs = {
            str(s.get("ref"))
            for s in (obj.get("spec") or {}).get("sources") or []
            if s.get("providerClass") == PROVIDER_CLASS_VSPHERE and s.get("ref")
        }
        out: set[Request] = set()
        for ref in refs:
            for t in ctx.cache.by_index(VSPHERE_MACHINE_TEMPLATE, TEMPLATE_INDEX, ref):
                meta = t["metadata"]
                out.add(Request(meta.get("namespace") or "", meta["name"]))
        return sorted(out, key=lambda r: (r.namespace, r.name))

    primary: list[Predicate] = [GenerationChangedPredicate()]
    if ctx.watch_filter:
        primary.append(watch_filter_predicate(ctx.watch_filter))
    return (
        ControllerBuilder(mgr)
        .named("vspheremachinetemplate")
        .for_(VSPHERE_MACHINE_TEMPLATE, predicates=[and_(*primary)])
        .watches(VM_IMAGE, image_to_templates)
        .with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles)
        .complete(VSphereMachineTemplateReconciler(ctx))
    )
