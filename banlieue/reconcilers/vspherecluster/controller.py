"""VSphereCluster (CAPI v1beta2 InfraCluster): failure domains aggregated from vSphere Providers.

SPEC §3: it talks to no backend. Rules of ``decide``:

* Providers: same namespace, provider class ``vsphere`` only; ``spec.providerRefs`` win when
  non-empty (a missing one makes Ready False ``ProviderNotFound`` while the others still count);
  else ``spec.providerSelector``; with neither, every vSphere Provider of the namespace (as
  ``VirtualMachine.spec.placement.providerSelector`` does).
* ``status.failureDomains``: every failure domain of the selected Providers, de-duplicated by
  name (the first Provider in refs order, else name order, wins), sorted by name, at most 100
  (the CRD's bound). ``attributes`` = the domain's labels plus ``provider`` (the Provider name),
  ``datacenter`` and ``cluster`` from ``attributes.raw`` (labels win on a clash).
* Not advertised, listed in ``status.excludedFailureDomains`` with why (``why_excluded``; a
  domain advertised where no machine can be realised fails every machine CAPI places there):
  the domains of a Provider that takes no new machines (being deleted, or ``Ready`` False
  ``DuplicateVCenter``, ADR 0013); a domain with no ``availableNetworkClasses`` (a machine
  there could get no NIC; CAPV advertises only the deployment zones whose failure domain it
  validated); a domain whose ``availableStorageClasses`` / ``availableNetworkClasses`` lack a
  class ``spec.machineRequirements`` names (issue 21).
* ``controlPlane``: ``spec.controlPlaneFailureDomainSelector`` matched against those attributes;
  no selector -> every domain is a control-plane domain (CAPV's VSphereFailureDomain default,
  and what "spread a control plane across all six" on the design page needs).
* Transient errors: a Provider keeps its last known failure domains in its status (SPEC §2), so
  reading it is enough; a selected Provider that is not Ready still contributes them.
* ``status.initialization.provisioned``: true once at least one failure domain is known, and
  then kept (CAPI reads it as a milestone). ``status.controlPlaneEndpoint`` mirrors the spec
  (the control-plane provider may fill the spec later; it does not gate provisioned).
* ``Paused`` (CAPI v1beta2): ``spec.paused``, the ``cluster.x-k8s.io/paused`` annotation, or the
  owner CAPI Cluster's ``spec.paused``; while paused nothing else changes.
* ``Ready``: True ``Ready`` with failure domains and every referenced Provider found; False
  ``ProviderNotFound``, ``NoFailureDomains``, ``Paused`` (only when no Ready existed yet) or
  ``Deleting``.
* Externally managed (CAPI v1beta2 InfraCluster contract): with the annotation
  ``cluster.x-k8s.io/managed-by`` (any value) nothing is written: the system named there owns
  the status (``initialization.provisioned``, ``failureDomains``, endpoint) and CAPI copies it
  from the VSphereCluster as usual. Machines still place by the Cluster's copy of those domains,
  matched with the Providers' domains by name.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from banlieue.api.conditions import PAUSED as PAUSED_CONDITION
from banlieue.api.conditions import READY, get_condition, set_condition
from banlieue.api.infrastructure import ExcludedFailureDomain, VSphereCluster, VSphereClusterStatus
from banlieue.api.infrastructure import VSphereClusterReason as Reason
from banlieue.api.infrastructure import VSphereMachineReason as MachineReason
from banlieue.api.meta import APIEndpoint, FailureDomain, Initialization
from banlieue.api.provider import Provider, ProviderFailureDomain
from banlieue.reconcilers.context import RoleContext
from banlieue.reconcilers.kinds import (
    CAPI_ANNOTATION_MANAGED_BY,
    CAPI_ANNOTATION_PAUSED,
    CAPI_CLUSTER,
    CAPI_LABEL_CLUSTER_NAME,
    PROVIDER,
    PROVIDER_CLASS_VSPHERE,
    VSPHERE_CLUSTER,
)
from banlieue.reconcilers.read_your_writes import ReadYourWrites
from banlieue.reconcilers.vspheremachine.placement import refuses_new_machines
from banlieue.runtime.builder import ControllerBuilder, ManagerLike
from banlieue.runtime.controller import Controller
from banlieue.runtime.errors import ApiError, NotFound
from banlieue.runtime.event import Object
from banlieue.runtime.informer import MIN_WATCH_TIMEOUT_SECONDS
from banlieue.runtime.log import get_logger
from banlieue.runtime.predicate import Funcs, and_, watch_filter_predicate
from banlieue.runtime.reconcile import Request, Result

log = get_logger("reconcilers.vspherecluster")

MAX_FAILURE_DOMAINS = 100
"""``status.failureDomains`` maxItems in the CRD."""
CAPI_CRD_RETRY_SECONDS = 300.0
"""How often the CAPI Cluster watch looks again for the Cluster CRD when it is not installed."""
def capi_watch_timeout() -> int:
    """``timeoutSeconds`` of one CAPI Cluster watch request (then it is resumed from its last
    resourceVersion): uniform in [``MIN_WATCH_TIMEOUT_SECONDS``, 2x), as the informers ask
    (``runtime.informer``: kube-apiserver's own default; a re-open every 5 minutes was an idle
    request of its own, issue 22)."""
    return random.randrange(MIN_WATCH_TIMEOUT_SECONDS, 2 * MIN_WATCH_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Snapshot:
    """The cluster, every Provider of its namespace, whether its owner CAPI Cluster is paused, now."""

    cluster: VSphereCluster
    providers: tuple[Provider, ...]
    owner_paused: bool
    now: datetime


@dataclass(frozen=True)
class Plan:
    """The full desired status (None when it equals the current one)."""

    status: dict[str, Any] | None = None


def _selected(s: Snapshot) -> tuple[list[Provider], list[str]]:
    """(selected vSphere Providers in precedence order, names of referenced Providers not found)."""
    spec = s.cluster.spec
    vsphere = {p.metadata.name: p for p in s.providers if p.spec.provider_class_ref.name == PROVIDER_CLASS_VSPHERE}
    if spec.provider_refs:
        found = [vsphere[r.name] for r in spec.provider_refs if r.name in vsphere]
        return found, [r.name for r in spec.provider_refs if r.name not in vsphere]
    selector = spec.provider_selector
    chosen = [p for name, p in sorted(vsphere.items(), key=lambda kv: kv[0] or "")
              if selector is None or selector.matches(p.metadata.labels)]
    return chosen, []


def lacks(cluster: VSphereCluster, domain: ProviderFailureDomain) -> list[str]:
    """What ``spec.machineRequirements`` names that ``domain`` does not offer
    (``storageClass x``, ``networkClass y``), sorted; empty when it offers everything."""
    req = cluster.spec.machine_requirements
    if req is None:
        return []
    attrs = domain.attributes
    storage = set((attrs.available_storage_classes if attrs else None) or ())
    networks = set((attrs.available_network_classes if attrs else None) or ())
    out = [f"storageClass {n}" for n in sorted(set(req.storage_classes or ())) if n not in storage]
    return out + [f"networkClass {n}" for n in sorted(set(req.network_classes or ())) if n not in networks]


def why_excluded(cluster: VSphereCluster, provider: Provider, domain: ProviderFailureDomain) -> str | None:
    """Why ``domain`` of ``provider`` is not advertised (the ``excludedFailureDomains`` message),
    None when it is. Rules, first match wins: the Provider takes no new machines (being deleted,
    or ``Ready`` False ``DuplicateVCenter``: ``placement.refuses_new_machines``); it lacks a
    class ``spec.machineRequirements`` names (``lacks``); it offers no network class
    (``availableNetworkClasses`` empty: a machine placed there could get no NIC; CAPV likewise
    advertises only the deployment zones whose failure domain it validated, networks included)."""
    refused = refuses_new_machines(provider)
    if refused is not None:
        reason, _ = refused
        return ("its Provider is being deleted and takes no new machines" if reason == MachineReason.PROVIDER_DELETING
                else "its Provider reaches the same vCenter as an older Provider of this namespace (DuplicateVCenter) "
                     "and takes no new machines")
    missing = lacks(cluster, domain)
    if missing:
        return f"does not offer {', '.join(missing)} (spec.machineRequirements)"
    attrs = domain.attributes
    if not (attrs.available_network_classes if attrs else None):
        return ("offers no network class, so a machine placed there could get no NIC: add a network class whose port "
                "group this domain's hosts reach to the Provider's spec.capabilities.networkClasses")
    return None


def excluded(s: Snapshot) -> list[ExcludedFailureDomain]:
    """The selected Providers' failure domains left out (``why_excluded``) and not advertised by
    another selected Provider under the same name, sorted by name, at most
    ``MAX_FAILURE_DOMAINS``."""
    out: dict[str, ExcludedFailureDomain] = {}
    advertised = {d.name for d in aggregate(s)}
    providers, _ = _selected(s)
    for provider in providers:
        for domain in (provider.status.failure_domains if provider.status else None) or ():
            why = why_excluded(s.cluster, provider, domain)
            if why is not None and domain.name not in out and domain.name not in advertised:
                out[domain.name] = ExcludedFailureDomain(name=domain.name, provider=provider.metadata.name or "", message=why)
    return [out[n] for n in sorted(out)][:MAX_FAILURE_DOMAINS]


def aggregate(s: Snapshot) -> list[FailureDomain]:
    """The CAPI failure domains of the selected Providers that can take machines
    (``why_excluded`` None; module docstring)."""
    selector = s.cluster.spec.control_plane_failure_domain_selector
    seen: dict[str, FailureDomain] = {}
    providers, _ = _selected(s)
    for provider in providers:
        for domain in (provider.status.failure_domains if provider.status else None) or ():
            if domain.name in seen or why_excluded(s.cluster, provider, domain) is not None:
                continue
            attrs: dict[str, str] = {"provider": provider.metadata.name or ""}
            raw = domain.attributes.raw if domain.attributes else None
            if raw is not None and raw.datacenter:
                attrs["datacenter"] = raw.datacenter
            if raw is not None and raw.cluster:
                attrs["cluster"] = raw.cluster
            attrs.update(domain.labels or {})
            control_plane = selector is None or selector.matches(attrs)
            seen[domain.name] = FailureDomain(name=domain.name, control_plane=control_plane, attributes=attrs)
    return [seen[name] for name in sorted(seen)][:MAX_FAILURE_DOMAINS]


def decide(s: Snapshot) -> Plan:
    """The status for one reconcile (module docstring). Never raises."""
    cluster = s.cluster
    if CAPI_ANNOTATION_MANAGED_BY in (cluster.metadata.annotations or {}):
        return Plan(status=None)  # externally managed: its status is another system's
    gen = cluster.metadata.generation
    status = (cluster.status or VSphereClusterStatus()).model_copy(deep=True)
    conds = list(status.conditions or ())

    def set_(type_: str, value: bool, reason: str, message: str = "") -> None:
        nonlocal conds
        conds = set_condition(conds, type_, value, reason, message[:32768], gen, s.now)

    annotated = (cluster.metadata.annotations or {}).get(CAPI_ANNOTATION_PAUSED) is not None
    if cluster.metadata.deletion_timestamp is not None:
        set_(READY, False, Reason.DELETING, "the VSphereCluster is being deleted")
    elif cluster.spec.paused or annotated or s.owner_paused:
        why = "spec.paused is true" if cluster.spec.paused else (
            f"annotation {CAPI_ANNOTATION_PAUSED} is set" if annotated else "the owner Cluster's spec.paused is true")
        set_(PAUSED_CONDITION, True, Reason.PAUSED, why)
        if get_condition(conds, READY) is None:
            set_(READY, False, Reason.PAUSED, why)
    else:
        set_(PAUSED_CONDITION, False, Reason.NOT_PAUSED)
        domains = aggregate(s)
        providers, missing = _selected(s)
        status.failure_domains = domains or None
        left_out = excluded(s)
        status.excluded_failure_domains = left_out or None
        status.control_plane_endpoint = (
            cluster.spec.control_plane_endpoint.model_copy()
            if cluster.spec.control_plane_endpoint and cluster.spec.control_plane_endpoint != APIEndpoint() else None
        )
        was_provisioned = bool(status.initialization and status.initialization.provisioned)
        status.initialization = Initialization(provisioned=True) if domains or was_provisioned else None
        status.observed_generation = gen
        if missing:
            set_(READY, False, Reason.PROVIDER_NOT_FOUND,
                 f"vSphere Providers not found in namespace {cluster.metadata.namespace}: {', '.join(missing)}")
        elif not domains and left_out:
            set_(READY, False, Reason.NO_FAILURE_DOMAINS,
                 f"no failure domain of the selected Providers can take machines: {len(left_out)} excluded, "
                 "each with the reason in status.excludedFailureDomains (a missing network class, "
                 "spec.machineRequirements, or a Provider being deleted)")
        elif not domains:
            names = ", ".join(p.metadata.name or "" for p in providers)
            set_(READY, False, Reason.NO_FAILURE_DOMAINS,
                 f"selected Providers {names} report no failure domains yet" if providers
                 else f"no vSphere Provider selected in namespace {cluster.metadata.namespace}")
        else:
            note = f"; {len(left_out)} excluded (status.excludedFailureDomains)" if left_out else ""
            set_(READY, True, Reason.READY, f"{len(domains)} failure domains from {len(providers)} Providers{note}")
    status.conditions = conds
    desired = status.to_wire()
    current = (cluster.status or VSphereClusterStatus()).to_wire()
    return Plan(status=None if desired == current else desired)


def _owner_cluster(obj: Object) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == CAPI_CLUSTER.kind and str(ref.get("apiVersion", "")).startswith(f"{CAPI_CLUSTER.group}/"):
            return str(ref.get("name"))
    return None


class OwnerClusters:
    """``spec.paused`` of the CAPI Clusters ``capi_cluster_events`` lists and watches, by
    (namespace, name): what the reconciler reads instead of a GET per reconcile (issue 22: a
    Provider's status writes during a wave reconciled every VSphereCluster of its namespace, and
    each GET its Cluster, 1.27 GETs per machine at 1,000 machines). ``listed`` is False until a
    list succeeded, and again while the CAPI Cluster kind is not served: then ``paused`` gives
    None and the reconciler asks the API server."""

    def __init__(self) -> None:
        self.listed = False
        self._paused: dict[tuple[str, str], bool] = {}

    def replace(self, items: list[Object]) -> None:
        """The whole list (``items``: Cluster objects) just read."""
        self._paused = {_key(o): _spec_paused(o) for o in items}
        self.listed = True

    def update(self, event_type: str, obj: Object) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of a Cluster."""
        if event_type == "DELETED":
            self._paused.pop(_key(obj), None)
        else:
            self._paused[_key(obj)] = _spec_paused(obj)

    def unserved(self) -> None:
        """The Cluster kind answers 404 (CAPI not installed): nothing is known."""
        self.listed = False
        self._paused = {}

    def paused(self, namespace: str, name: str) -> bool | None:
        """Whether the Cluster is paused (False when there is none); None before a list."""
        if not self.listed:
            return None
        return self._paused.get((namespace, name), False)


def _key(obj: Object) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def _spec_paused(obj: Object) -> bool:
    return bool((obj.get("spec") or {}).get("paused"))


class VSphereClusterReconciler:
    """Reconciles one VSphereCluster (module docstring). ``owners``: the Clusters'
    ``spec.paused`` as ``capi_cluster_events`` keeps them (a GET per reconcile without it)."""

    def __init__(self, ctx: RoleContext, owners: OwnerClusters | None = None) -> None:
        self.ctx = ctx
        self.selected = watch_filter_predicate(ctx.watch_filter or "").create
        self.written = ReadYourWrites()
        self.owners = owners or OwnerClusters()

    async def _owner_paused(self, name: str, namespace: str) -> bool:
        known = self.owners.paused(namespace, name)
        if known is not None:
            return known
        try:
            owner = await self.ctx.client.get(CAPI_CLUSTER, name, namespace)
        except ApiError:
            return False  # no Cluster (or no CAPI CRD): nothing pauses us
        return _spec_paused(owner)

    async def reconcile(self, request: Request) -> Result:
        key = f"{request.namespace}/{request.name}"
        raw = self.written.view(key, self.ctx.cache.get(VSPHERE_CLUSTER, request.name, request.namespace))
        if raw is None or not self.selected(raw):
            return Result()
        try:
            cluster = VSphereCluster.from_wire(dict(raw))
        except ValidationError:
            log.warning("VSphereCluster does not parse", name=request.name, namespace=request.namespace)
            return Result()
        providers: list[Provider] = []
        for obj in self.ctx.cache.list(PROVIDER, request.namespace):
            try:
                providers.append(Provider.from_wire(dict(obj)))
            except ValidationError:
                continue
        # CAPI util.GetOwnerCluster, then util.GetClusterFromMetadata (the cluster-name label).
        owner = _owner_cluster(raw) or (raw["metadata"].get("labels") or {}).get(CAPI_LABEL_CLUSTER_NAME)
        owner_paused = await self._owner_paused(owner, request.namespace) if owner else False
        plan = decide(Snapshot(cluster, tuple(providers), owner_paused, self.ctx.now().astimezone(UTC)))
        if plan.status is not None:
            body = {"apiVersion": raw.get("apiVersion"), "kind": raw.get("kind"),
                    "metadata": {"name": request.name, "namespace": request.namespace}, "status": plan.status}
            try:
                written = await self.ctx.client.apply_status(VSPHERE_CLUSTER, body, field_manager=self.ctx.field_manager)
            except NotFound:
                return Result()
            self.written.record(key, raw, written)
        return Result()


def _owned_by_cluster(obj: Object, cluster: str) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return _owner_cluster(obj) == cluster or labels.get(CAPI_LABEL_CLUSTER_NAME) == cluster


async def capi_cluster_events(ctx: RoleContext, owners: OwnerClusters | None = None) -> AsyncIterator[Request]:
    """Requests for the VSphereClusters of every CAPI Cluster that changes (``spec.paused``),
    keeping ``owners`` (each Cluster's ``spec.paused``) up to date before each request.

    A channel source rather than an informer: the CAPI Cluster CRD may not be installed (the
    standalone VirtualMachine path needs no CAPI), and an informer on a missing resource would
    keep the controller's caches from syncing. List, then watch from the list's
    resourceVersion; on 404 (no CRD) look again every ``CAPI_CRD_RETRY_SECONDS``; on any other
    API error (410 Gone, 5xx, a dropped connection) list again after a second.
    """
    client = ctx.client
    resource_version: str | None = None
    while True:
        try:
            if resource_version is None:
                listed = await client.list(CAPI_CLUSTER, ctx.namespace)
                resource_version = str(listed.get("metadata", {}).get("resourceVersion") or "")
                if owners is not None:
                    owners.replace(list(listed.get("items") or []))
            async for event in client.watch(CAPI_CLUSTER, ctx.namespace, resource_version=resource_version,
                                            timeout_seconds=capi_watch_timeout()):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    resource_version = None
                    break
                resource_version = str(obj.get("metadata", {}).get("resourceVersion") or resource_version)
                if event.get("type") == "BOOKMARK":
                    continue
                if owners is not None:
                    owners.update(str(event.get("type")), obj)
                meta = obj.get("metadata") or {}
                ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
                for vsc in ctx.cache.list(VSPHERE_CLUSTER, ns):
                    if _owned_by_cluster(vsc, name):
                        yield Request(ns, str(vsc["metadata"]["name"]))
        except NotFound:
            resource_version = None
            if owners is not None:
                owners.unserved()
            await asyncio.sleep(CAPI_CRD_RETRY_SECONDS)
        except ApiError as err:
            log.debug("CAPI Cluster watch restarts", error=str(err))
            resource_version = None
            await asyncio.sleep(1.0)


def _update_matters(old: Object, new: Object) -> bool:
    om: Mapping[str, Any] = old.get("metadata") or {}
    nm: Mapping[str, Any] = new.get("metadata") or {}
    keys = ("generation", "labels", "annotations", "deletionTimestamp", "ownerReferences")
    return any(om.get(k) != nm.get(k) for k in keys)


def setup(mgr: ManagerLike, ctx: RoleContext) -> Controller:
    """Register the ``vspherecluster`` controller: for_(VSphereCluster) (spec, labels,
    annotations, owners, deletion), Provider -> every VSphereCluster of its namespace, CAPI
    Cluster changes -> the VSphereClusters it owns (``capi_cluster_events``)."""
    cache = ctx.cache
    scoped = watch_filter_predicate(ctx.watch_filter or "")
    owners = OwnerClusters()

    def clusters_of(obj: Object) -> list[Request]:
        ns = str(obj["metadata"].get("namespace", ""))
        return [Request(ns, str(c["metadata"]["name"])) for c in cache.list(VSPHERE_CLUSTER, ns) if scoped.create(c)]

    return (
        ControllerBuilder(mgr)
        .named("vspherecluster")
        .for_(VSPHERE_CLUSTER, predicates=[and_(scoped, Funcs(update=_update_matters))])
        .watches(PROVIDER, clusters_of)
        .watches_channel(capi_cluster_events(ctx, owners))
        .with_options(max_concurrent_reconciles=ctx.max_concurrent_reconciles)
        .complete(VSphereClusterReconciler(ctx, owners))
    )
