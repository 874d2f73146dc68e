"""A CAPI-core simulator for tests: what Cluster API v1beta2 core (the Cluster and Machine
controllers, plus the part of a control-plane provider / MachineSet that mints machines) does to an
infrastructure provider's objects, by contract (cluster-api book, "Provider contracts" v1beta2:
InfraCluster, InfraMachine, InfraMachineTemplate; "Controllers": Cluster, Machine).

Real CAPI (v1.14.2, ``make capi``) drives banlieue in ``tests/capi/test_real_capi.py``,
``test_real_capi_workload.py`` (on the workload-cluster stand-in) and ``test_clusterctl.py``
(issue 17): Cluster provisioning, MachineDeployments per failure domain and without one (banlieue
places those), KubeadmControlPlane's Machines one per control-plane failure domain and scale-up
past one (external etcd), control-plane Machines only on control-plane domains with workers
placed by banlieue on the other vCenter's (one Machine per (vCenter, datacenter, cluster) pair),
late bootstrap data (a worker WaitingForBootstrapData until CABPK's join data, which reaches
guestinfo), scale down, Machine deletion, pause of provisioned machines and of a VSphereCluster
spec change, MachineHealthCheck remediation, rolling update, Cluster deletion, ClusterClass, an
externally managed VSphereCluster, the templates' capacity. The acceptance tests that ran here
for those were deleted (issue 17 item 7). The simulator stays only where real CAPI cannot reach
(``test_capi_acceptance.py``):

* ``test_machines_minted_or_deleted_while_paused_wait_for_unpause``: a VSphereMachine minted,
  or a Machine deleted, while its Cluster is paused. Real CAPI's MachineSet, KCP and Machine
  controllers pause with the Cluster, so real CAPI never creates or deletes an InfraMachine of a
  paused Cluster; only something outside CAPI does (``clusterctl move`` creating the objects in
  a paused target cluster, a user, a GitOps tool), and banlieue must then hold still: no clone,
  no destroy, until unpaused.
* **No Go toolchain**: that test and ``test_capi_simulator_unit.py`` (the contract checker and
  the simulator's own rules) run on the API-server double without ``make capi`` / ``make
  envtest``; a machine where those are missing skips the real-CAPI tests.

Differences from real CAPI that the real suite exposed (the simulator now follows CAPI where it
applies): the InfraCluster's Cluster owner reference is plain (``controller: false``) without a
topology (the simulator set ``controller: true``; with a ClusterClass CAPI sets it); a Machine of
a MachineDeployment has no failure domain unless the template names one (the simulator always
picked one; banlieue now places such machines itself); KubeadmControlPlane needs RBAC on the
provider's group through its own aggregation label (the simulator has no RBAC); real CAPI's
managers dial ``controlPlaneEndpoint`` (the simulator never dials).

What it does, against the API server through ``banlieue.runtime.client.Client``:

* Cluster controller (``sync_cluster``): sets the Cluster as (non-controller) owner of the object named by
  ``Cluster.spec.infrastructureRef`` ({apiGroup, kind, name}) and labels it
  ``cluster.x-k8s.io/cluster-name``; once the InfraCluster reports
  ``status.initialization.provisioned`` it surfaces ``Cluster.status.initialization.
  infrastructureProvisioned`` (never unset again), the InfraCluster's ``spec.controlPlaneEndpoint``
  into ``Cluster.spec.controlPlaneEndpoint`` (only while the Cluster has none) and its
  ``status.failureDomains`` into ``Cluster.status.failureDomains``.
* Minting (``create_machine``/``scale``; KubeadmControlPlane / MachineSet): a bootstrap data Secret
  ``<machine>-bootstrap`` (keys ``value`` and ``format``, type ``cluster.x-k8s.io/secret``), a
  Machine (``spec.clusterName``, ``spec.bootstrap.dataSecretName``, ``spec.infrastructureRef``,
  ``spec.failureDomain``, finalizer ``machine.cluster.x-k8s.io``) and the InfraMachine cloned from
  the InfraMachineTemplate's ``spec.template`` (name = machine name, label
  ``cluster.x-k8s.io/cluster-name``, annotations ``cluster.x-k8s.io/cloned-from-name`` /
  ``-groupkind``, the Machine as controller owner). The InfraMachine's ``spec.failureDomain`` is
  left unset: the v1beta2 provider must read ``Machine.spec.failureDomain``.
* Failure domains: read from ``Cluster.status.failureDomains`` (never from the InfraCluster), the
  one with the fewest machines of this cluster wins, ties by name (KCP's spreading, which is round
  robin for a fresh cluster); control-plane machines only on ``controlPlane: true`` domains.
* Machine controller (``sync_machines``): once the InfraMachine reports
  ``status.initialization.provisioned``: ``Machine.spec.providerID`` <- ``spec.providerID``,
  ``Machine.status.addresses`` <- ``status.addresses``, ``status.failureDomain``,
  ``status.initialization.infrastructureProvisioned``; the InfraMachine's ``Ready`` condition is
  mirrored as the Machine's ``InfrastructureReady`` condition at every sync.
* Pausing: ``Cluster.spec.paused`` (``pause``/``unpause``), optionally also the
  ``cluster.x-k8s.io/paused`` annotation on the infrastructure objects (what ``clusterctl move``
  sets). CAPI core does nothing for a paused cluster: ``sync`` then writes nothing.
* Deletion (``delete_machine``, ``delete_all_machines`` in reverse creation order): DELETE the
  Machine (held by its finalizer), delete the InfraMachine and wait until it is gone (the
  provider's finalizer: the VM is destroyed), delete the bootstrap Secret, drop the Machine's
  finalizer.

Every write is a JSON merge patch or a create; every wait is bounded and raises AssertionError
naming the object, the field and the last value seen.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from banlieue.reconcilers.kinds import (
    CAPI_CLUSTER,
    CAPI_MACHINE,
    VSPHERE_CLUSTER,
    VSPHERE_MACHINE,
    VSPHERE_MACHINE_TEMPLATE,
)
from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError, NotFound
from banlieue.runtime.kinds import SECRET

LABEL_CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
LABEL_CONTROL_PLANE = "cluster.x-k8s.io/control-plane"
ANNOTATION_PAUSED = "cluster.x-k8s.io/paused"
ANNOTATION_CLONED_FROM_NAME = "cluster.x-k8s.io/cloned-from-name"
ANNOTATION_CLONED_FROM_GROUPKIND = "cluster.x-k8s.io/cloned-from-groupkind"
MACHINE_FINALIZER = "machine.cluster.x-k8s.io"
BOOTSTRAP_SECRET_TYPE = "cluster.x-k8s.io/secret"
INFRA_TEMPLATE = VSPHERE_MACHINE_TEMPLATE
KUBERNETES_VERSION = "v1.33.0"


def pick_failure_domain(domains: Sequence[Mapping[str, Any]], used: Mapping[str, int], *, control_plane: bool) -> str | None:
    """The failure domain for the next machine: among ``domains`` (v1beta2 list
    ``[{name, controlPlane, attributes}]``; only ``controlPlane: true`` ones when ``control_plane``)
    the one with the fewest machines in ``used`` (name -> count), ties broken by name.

    KCP's rule (cluster-api ``failuredomains.PickFewest``): a fresh cluster therefore gets one
    machine per domain before any domain gets a second. None when no domain qualifies (CAPI then
    leaves ``Machine.spec.failureDomain`` empty).
    """
    names = sorted(str(d["name"]) for d in domains if d.get("name") and (not control_plane or d.get("controlPlane") is True))
    if not names:
        return None
    return min(names, key=lambda n: (used.get(n, 0), n))


def _owner(obj: Mapping[str, Any], *, controller: bool) -> dict[str, Any]:
    meta = obj["metadata"]
    ref = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"], "uid": meta["uid"]}
    if controller:
        ref.update(controller=True, blockOwnerDeletion=True)
    return ref


def _with_owner(refs: Sequence[Mapping[str, Any]], owner: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """``refs`` with ``owner`` as the (only) controller; None when already so (no write needed)."""
    if any(r.get("uid") == owner["uid"] and bool(r.get("controller")) == bool(owner.get("controller")) for r in refs):
        return None
    kept = [dict(r) for r in refs if r.get("uid") != owner["uid"] and not (owner.get("controller") and r.get("controller"))]
    return [*kept, dict(owner)]


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    """The ``status.conditions`` entry of ``type_`` (None when absent)."""
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


@dataclass
class CapiSimulator:
    """CAPI core for one Cluster ``cluster_name`` in ``namespace`` whose infrastructure is the
    VSphereCluster ``infra_cluster_name`` (module docstring)."""

    client: Client
    namespace: str
    cluster_name: str
    infra_cluster_name: str
    sync_errors: list[str] = field(default_factory=list)

    # --- reads -------------------------------------------------------------------------------
    async def cluster(self) -> dict[str, Any]:
        return await self.client.get(CAPI_CLUSTER, self.cluster_name, self.namespace)

    async def infra_cluster(self) -> dict[str, Any]:
        return await self.client.get(VSPHERE_CLUSTER, self.infra_cluster_name, self.namespace)

    async def machines(self) -> list[dict[str, Any]]:
        """Machines of this cluster, oldest first (creationTimestamp, then name)."""
        items = (await self.client.list(CAPI_MACHINE, self.namespace, label_selector=f"{LABEL_CLUSTER_NAME}={self.cluster_name}"))["items"]
        return sorted(items, key=lambda m: (m["metadata"].get("creationTimestamp", ""), m["metadata"]["name"]))

    async def infra_machine(self, name: str) -> dict[str, Any]:
        return await self.client.get(VSPHERE_MACHINE, name, self.namespace)

    async def failure_domains(self) -> list[dict[str, Any]]:
        """``Cluster.status.failureDomains`` (what CAPI spreads machines over)."""
        return list(((await self.cluster()).get("status") or {}).get("failureDomains") or [])

    # --- the Cluster ----------------------------------------------------------------------------
    async def create_cluster(self, *, paused: bool = False) -> dict[str, Any]:
        """Create the Cluster with ``spec.infrastructureRef`` -> the VSphereCluster (v1beta2
        ContractVersionedObjectReference), then run one Cluster-controller pass."""
        created = await self.client.create(CAPI_CLUSTER, {
            "apiVersion": CAPI_CLUSTER.api_version, "kind": "Cluster",
            "metadata": {"name": self.cluster_name, "namespace": self.namespace},
            "spec": {"paused": paused, "clusterNetwork": {"pods": {"cidrBlocks": ["192.168.0.0/16"]}},
                     "infrastructureRef": {"apiGroup": VSPHERE_CLUSTER.group, "kind": VSPHERE_CLUSTER.kind, "name": self.infra_cluster_name}},
        })
        if not paused:
            await self.sync_cluster()
        return created

    async def sync_cluster(self) -> dict[str, Any]:
        """One Cluster-controller pass (module docstring); returns the Cluster. Writes only what changes."""
        cluster = await self.cluster()
        infra = await self.infra_cluster()
        meta = infra["metadata"]
        patch: dict[str, Any] = {}
        # CAPI v1.14: a plain owner reference (controller: false) without a topology.
        refs = _with_owner(meta.get("ownerReferences") or [], _owner(cluster, controller=False))
        if refs is not None:
            patch["ownerReferences"] = refs
        if (meta.get("labels") or {}).get(LABEL_CLUSTER_NAME) != self.cluster_name:
            patch["labels"] = {LABEL_CLUSTER_NAME: self.cluster_name}
        if patch:
            infra = await self.client.patch(VSPHERE_CLUSTER, self.infra_cluster_name, self.namespace, {"metadata": patch})
        status = infra.get("status") or {}
        if (status.get("initialization") or {}).get("provisioned") is not True:
            return cluster
        endpoint = (infra.get("spec") or {}).get("controlPlaneEndpoint") or {}
        if endpoint.get("host") and not ((cluster.get("spec") or {}).get("controlPlaneEndpoint") or {}).get("host"):
            cluster = await self.client.patch(CAPI_CLUSTER, self.cluster_name, self.namespace, {"spec": {"controlPlaneEndpoint": endpoint}})
        current = cluster.get("status") or {}
        want = {"initialization": {**(current.get("initialization") or {}), "infrastructureProvisioned": True},
                "failureDomains": copy.deepcopy(status.get("failureDomains") or [])}
        if {k: current.get(k) for k in want} != want:
            cluster = await self.client.patch_status(CAPI_CLUSTER, self.cluster_name, self.namespace, {"status": want})
        return cluster

    async def wait_infrastructure_provisioned(self, timeout: float = 30.0) -> dict[str, Any]:
        """Sync the Cluster until ``status.initialization.infrastructureProvisioned`` is true."""
        deadline = time.monotonic() + timeout
        while True:
            cluster = await self.sync_cluster()
            if ((cluster.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned") is True:
                return cluster
            if time.monotonic() > deadline:
                infra = await self.infra_cluster()
                raise AssertionError(f"Cluster {self.cluster_name}: status.initialization.infrastructureProvisioned not true within "
                                     f"{timeout} s; VSphereCluster status: {infra.get('status')!r}")
            await asyncio.sleep(0.2)

    async def paused(self) -> bool:
        return bool(((await self.cluster()).get("spec") or {}).get("paused"))

    async def pause(self, *, annotate: bool = False) -> None:
        """``Cluster.spec.paused: true``; with ``annotate`` also ``cluster.x-k8s.io/paused`` on the
        VSphereCluster and every VSphereMachine of the cluster (``clusterctl move``)."""
        await self.client.patch(CAPI_CLUSTER, self.cluster_name, self.namespace, {"spec": {"paused": True}})
        if annotate:
            await self._annotate_paused("")

    async def unpause(self) -> None:
        """Undo ``pause`` (annotations removed, ``spec.paused: false``)."""
        await self._annotate_paused(None)
        await self.client.patch(CAPI_CLUSTER, self.cluster_name, self.namespace, {"spec": {"paused": False}})

    async def _annotate_paused(self, value: str | None) -> None:
        patch = {"metadata": {"annotations": {ANNOTATION_PAUSED: value}}}
        infra = await self.infra_cluster()
        if value is not None or ANNOTATION_PAUSED in (infra["metadata"].get("annotations") or {}):
            await self.client.patch(VSPHERE_CLUSTER, self.infra_cluster_name, self.namespace, patch)
        for m in await self.machines():
            name = m["spec"]["infrastructureRef"]["name"]
            with contextlib.suppress(NotFound):
                im = await self.infra_machine(name)
                if value is not None or ANNOTATION_PAUSED in (im["metadata"].get("annotations") or {}):
                    await self.client.patch(VSPHERE_MACHINE, name, self.namespace, patch)

    # --- minting machines ---------------------------------------------------------------------------
    async def create_machine(self, name: str, template: str, *, control_plane: bool, failure_domain: str | None = None,
                             bootstrap_data: str | None = None) -> dict[str, Any]:
        """Mint one machine (module docstring): bootstrap Secret, Machine, VSphereMachine cloned
        from the VSphereMachineTemplate ``template``. ``failure_domain`` None: picked with
        ``pick_failure_domain`` over ``Cluster.status.failureDomains``. ``bootstrap_data``
        (cloud-config text) defaults to one naming the machine. Returns the Machine.

        Raises NotFound (template missing) or AlreadyExists.
        """
        tmpl = await self.client.get(INFRA_TEMPLATE, template, self.namespace)
        if failure_domain is None:
            used = Counter(str(m["spec"].get("failureDomain")) for m in await self.machines() if m["spec"].get("failureDomain"))
            failure_domain = pick_failure_domain(await self.failure_domains(), used, control_plane=control_plane)
        labels = {LABEL_CLUSTER_NAME: self.cluster_name, **({LABEL_CONTROL_PLANE: ""} if control_plane else {})}
        secret = await self._bootstrap_secret(name, bootstrap_data)
        spec: dict[str, Any] = {
            "clusterName": self.cluster_name, "version": KUBERNETES_VERSION,
            "bootstrap": {"dataSecretName": secret},
            "infrastructureRef": {"apiGroup": VSPHERE_MACHINE.group, "kind": VSPHERE_MACHINE.kind, "name": name},
        }
        if failure_domain:
            spec["failureDomain"] = failure_domain
        machine = await self.client.create(CAPI_MACHINE, {
            "apiVersion": CAPI_MACHINE.api_version, "kind": "Machine",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels, "finalizers": [MACHINE_FINALIZER]},
            "spec": spec,
        })
        tmeta = ((tmpl.get("spec") or {}).get("template") or {}).get("metadata") or {}
        await self.client.create(VSPHERE_MACHINE, {
            "apiVersion": VSPHERE_MACHINE.api_version, "kind": VSPHERE_MACHINE.kind,
            "metadata": {
                "name": name, "namespace": self.namespace,
                "labels": {**(tmeta.get("labels") or {}), **labels},
                "annotations": {**(tmeta.get("annotations") or {}), ANNOTATION_CLONED_FROM_NAME: template,
                                ANNOTATION_CLONED_FROM_GROUPKIND: f"{INFRA_TEMPLATE.kind}.{INFRA_TEMPLATE.group}"},
                "ownerReferences": [_owner(machine, controller=True)],
            },
            "spec": copy.deepcopy(tmpl["spec"]["template"]["spec"]),
        })
        return machine

    async def _bootstrap_secret(self, name: str, data: str | None) -> str:
        secret = f"{name}-bootstrap"
        text = data if data is not None else f"#cloud-config\nhostname: {name}\nruncmd:\n  - echo {name} joined\n"
        await self.client.create(SECRET, {
            "apiVersion": "v1", "kind": "Secret", "type": BOOTSTRAP_SECRET_TYPE,
            "metadata": {"name": secret, "namespace": self.namespace, "labels": {LABEL_CLUSTER_NAME: self.cluster_name}},
            "data": {"value": base64.b64encode(text.encode()).decode(), "format": base64.b64encode(b"cloud-config").decode()},
        })
        return secret

    async def scale(self, template: str, replicas: int, *, control_plane: bool, prefix: str) -> list[str]:
        """Create machines ``<prefix>-<i>`` one at a time (each choice sees the previous ones)
        until the cluster has ``replicas`` machines of this kind; returns the new names."""
        have = [m for m in await self.machines() if (LABEL_CONTROL_PLANE in m["metadata"].get("labels", {})) == control_plane]
        names = [m["metadata"]["name"] for m in have]
        created: list[str] = []
        i = 0
        while len(have) + len(created) < replicas:
            name = f"{prefix}-{i}"
            i += 1
            if name in names:
                continue
            await self.create_machine(name, template, control_plane=control_plane)
            created.append(name)
        return created

    # --- the Machine controller --------------------------------------------------------------------
    async def sync_machine(self, machine: Mapping[str, Any]) -> dict[str, Any]:
        """One Machine-controller pass for ``machine``; returns the Machine as now stored."""
        name = machine["metadata"]["name"]
        try:
            infra = await self.infra_machine(machine["spec"]["infrastructureRef"]["name"])
        except NotFound:
            return dict(machine)
        meta = infra["metadata"]
        patch: dict[str, Any] = {}
        refs = _with_owner(meta.get("ownerReferences") or [], _owner({"apiVersion": CAPI_MACHINE.api_version, "kind": "Machine", **machine}, controller=True))
        if refs is not None:
            patch["ownerReferences"] = refs
        if (meta.get("labels") or {}).get(LABEL_CLUSTER_NAME) != self.cluster_name:
            patch["labels"] = {LABEL_CLUSTER_NAME: self.cluster_name}
        if patch and meta.get("deletionTimestamp") is None:
            await self.client.patch(VSPHERE_MACHINE, meta["name"], self.namespace, {"metadata": patch})
        status = infra.get("status") or {}
        current = dict(machine.get("status") or {})
        want: dict[str, Any] = {}
        ready = condition(infra, "Ready")
        if ready is not None:
            mirrored = {"type": "InfrastructureReady", "status": ready["status"], "reason": ready.get("reason", ""),
                        "message": ready.get("message", ""), "observedGeneration": (machine["metadata"].get("generation") or 1)}
            old = condition(machine, "InfrastructureReady")
            if old is None or {k: old.get(k) for k in mirrored} != mirrored:
                mirrored["lastTransitionTime"] = (old or {}).get("lastTransitionTime") if old and old["status"] == ready["status"] \
                    else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                others = [c for c in current.get("conditions") or () if c.get("type") != "InfrastructureReady"]
                want["conditions"] = [*others, mirrored]
        if (status.get("initialization") or {}).get("provisioned") is True:
            provider_id = (infra.get("spec") or {}).get("providerID")
            if provider_id and (machine.get("spec") or {}).get("providerID") != provider_id:
                machine = await self.client.patch(CAPI_MACHINE, name, self.namespace, {"spec": {"providerID": provider_id}})
            init = {**(current.get("initialization") or {}), "infrastructureProvisioned": True}
            if current.get("initialization") != init:
                want["initialization"] = init
            if status.get("addresses") and current.get("addresses") != status["addresses"]:
                want["addresses"] = copy.deepcopy(status["addresses"])
            if status.get("failureDomain") and current.get("failureDomain") != status["failureDomain"]:
                want["failureDomain"] = status["failureDomain"]
        if want:
            machine = await self.client.patch_status(CAPI_MACHINE, name, self.namespace, {"status": want})
        return dict(machine)

    async def sync(self) -> None:
        """One pass of CAPI core over this cluster; nothing at all while ``Cluster.spec.paused``."""
        if await self.paused():
            return
        await self.sync_cluster()
        for m in await self.machines():
            if m["metadata"].get("deletionTimestamp") is None:
                await self.sync_machine(m)

    @contextlib.asynccontextmanager
    async def running(self, interval: float = 0.25) -> AsyncIterator[CapiSimulator]:
        """Run ``sync`` every ``interval`` seconds in the background (CAPI core's controllers);
        API errors of a pass are recorded in ``sync_errors`` and retried next pass."""

        async def loop() -> None:
            while True:
                try:
                    await self.sync()
                except ApiError as err:  # a Conflict or a race with deletion: the next pass retries
                    self.sync_errors.append(f"{type(err).__name__}: {err}")
                await asyncio.sleep(interval)

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # --- deletion ------------------------------------------------------------------------------------
    async def delete_machine(self, name: str, timeout: float = 30.0, *,
                             observe: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Delete one machine the way the Machine controller does (module docstring); ``observe``
        is called with the VSphereMachine at every poll while it is being deleted (contract
        checks). Raises AssertionError when it is not gone within ``timeout`` seconds."""
        machine = await self.client.get(CAPI_MACHINE, name, self.namespace)
        await self.client.delete(CAPI_MACHINE, name, self.namespace)
        infra_name = machine["spec"]["infrastructureRef"]["name"]
        await self.client.delete(VSPHERE_MACHINE, infra_name, self.namespace, ignore_not_found=True)
        deadline = time.monotonic() + timeout
        while True:
            try:
                last = await self.infra_machine(infra_name)
            except NotFound:
                break
            if observe is not None:
                observe(last)
            if time.monotonic() > deadline:
                raise AssertionError(f"VSphereMachine {infra_name}: still present {timeout} s after DELETE "
                                     f"(finalizers {last['metadata'].get('finalizers')}, Ready {condition(last, 'Ready')})")
            await asyncio.sleep(0.2)
        secret = (machine["spec"].get("bootstrap") or {}).get("dataSecretName")
        if secret:
            await self.client.delete(SECRET, secret, self.namespace, ignore_not_found=True)
        with contextlib.suppress(NotFound):
            await self.client.patch(CAPI_MACHINE, name, self.namespace, {"metadata": {"finalizers": None}})

    async def delete_all_machines(self, timeout: float = 60.0, *,
                                  observe: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
        """Delete every machine of the cluster, newest first (``delete_machine`` each); returns
        the names in that order."""
        names = [m["metadata"]["name"] for m in reversed(await self.machines())]
        for name in names:
            await self.delete_machine(name, timeout, observe=observe)
        return names
