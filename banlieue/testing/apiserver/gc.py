"""Background controllers of the control plane: garbage collector, namespace and CRD cleanup.

Source: kube-controller-manager garbage collector (dependents found by ``ownerReferences[].uid``;
Background: owner gone -> dependents deleted; Foreground: owner keeps the ``foregroundDeletion``
finalizer until dependents with ``blockOwnerDeletion`` are gone; Orphan: the ``orphan``
finalizer is removed after the owner's references are stripped from dependents), the namespace
controller (a terminating namespace's content is deleted, then the ``kubernetes`` finalizer is
removed), and the apiextensions finalizer controller (custom resources deleted before the CRD).
Work is asynchronous, like the real controllers: deletes return first, dependents go after.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from .errors import ApiError
from .resources import Registry, ResourceType
from .rest import Rest, WriteOptions
from .store import Store

JSON = dict[str, Any]
log = structlog.get_logger(__name__)
CRD_GR = ("apiextensions.k8s.io", "customresourcedefinitions")
NS_GR = ("", "namespaces")
RETRY_SECONDS = 0.2
NS_CONTENT_FAILURE = "NamespaceDeletionContentFailure"
NS_CONTENT_REMAINING = "NamespaceContentRemaining"
NS_FINALIZERS_REMAINING = "NamespaceFinalizersRemaining"
NS_CONDITIONS: dict[str, tuple[str, str]] = {
    "NamespaceDeletionDiscoveryFailure": ("ResourcesDiscovered", "All resources successfully discovered"),
    "NamespaceDeletionGroupVersionParsingFailure": ("ParsedGroupVersions", "All legacy kube types successfully parsed"),
    NS_CONTENT_FAILURE: ("ContentDeleted", "All content successfully deleted, may be waiting on finalization"),
    NS_CONTENT_REMAINING: ("ContentRemoved", "All content successfully removed"),
    NS_FINALIZERS_REMAINING: ("ContentHasNoFinalizers", "All content-preserving finalizers finished"),
}
"""The namespace controller's condition types in kube's order, with the reason and message of
their healthy (False) form (k8s.io/kubernetes ``pkg/controller/namespace/deletion``)."""


class GarbageCollector:
    """Processes owners and terminating namespaces/CRDs; wake it with :meth:`observe`."""

    def __init__(self, rest: Rest, registry: Registry) -> None:
        self.rest = rest
        self.store: Store = rest.store
        self.registry = registry
        self._gone_uids: set[str] = set()
        self._deleting: set[tuple[tuple[str, str], str, str]] = set()
        self._wake = asyncio.Event()

    def observe(self, rt: ResourceType, obj: JSON) -> None:
        """Rest.on_change hook: note removed owners and objects entering deletion."""
        md = obj["metadata"]
        key = (rt.group_resource, md.get("namespace", ""), md["name"])
        if self.store.get(rt.group_resource, key[1], key[2]) is None:
            self._gone_uids.add(md.get("uid", ""))
            self._deleting.discard(key)
        elif md.get("deletionTimestamp") and (
            rt.group_resource in (NS_GR, CRD_GR)
            or {"orphan", "foregroundDeletion"} & set(md.get("finalizers") or [])
        ):
            self._deleting.add(key)
        else:
            return
        self._wake.set()

    async def run(self) -> None:
        """Loop until cancelled."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=RETRY_SECONDS if self._deleting else None)
            except TimeoutError:
                pass
            self._wake.clear()
            await asyncio.sleep(0)  # let the request that triggered us answer first
            try:
                self.process()
            except ApiError as e:  # a concurrent change; the next pass retries
                log.debug("gc pass conflict", error=e.message)
            except Exception:  # keep collecting: one bad object must not stop the controller
                log.exception("gc pass failed")

    def process(self) -> None:
        """One pass over the pending work (synchronous; each step is a normal write)."""
        gone, self._gone_uids = self._gone_uids, set()
        for uid in gone:
            self._collect_dependents_of(uid)
        for key in list(self._deleting):
            gr, ns, name = key
            obj = self.store.get(gr, ns, name)
            if obj is None or not obj["metadata"].get("deletionTimestamp"):
                self._deleting.discard(key)
                continue
            rt = self.registry.for_group_resource(*gr)
            if rt is None:
                continue
            self._finalize(rt, obj)

    def _rt(self, gr: tuple[str, str]) -> ResourceType | None:
        return self.registry.for_group_resource(*gr)

    def _delete(self, gr: tuple[str, str], obj: JSON, policy: str = "Background") -> None:
        rt = self._rt(gr)
        if rt is None or (obj["metadata"].get("deletionTimestamp") and policy == "Background"):
            return
        md = obj["metadata"]
        try:
            self.rest.delete(rt, md.get("namespace", ""), md["name"], {"propagationPolicy": policy},
                             WriteOptions(field_manager="generic-garbage-collector"))
        except ApiError as e:
            if e.code != 404:
                raise

    def _update_meta(self, gr: tuple[str, str], obj: JSON, **changes: Any) -> None:
        rt = self._rt(gr)
        if rt is None:
            return
        new = dict(obj)
        new["metadata"] = {**obj["metadata"], **changes}
        md = new["metadata"]
        self.rest.update(rt, md.get("namespace", ""), md["name"], new,
                         WriteOptions(field_manager="generic-garbage-collector"), skip_unknown=True)

    def _collect_dependents_of(self, uid: str) -> None:
        for gr, dep in self.store.dependents(uid):
            refs = dep["metadata"].get("ownerReferences") or []
            alive = [r for r in refs if r.get("uid") != uid and self.store.by_uid(str(r.get("uid"))) is not None]
            if alive:
                self._update_meta(gr, dep, ownerReferences=alive)
            else:
                self._delete(gr, dep)

    def _remove_finalizer(self, rt: ResourceType, obj: JSON, finalizer: str) -> None:
        fins = [f for f in obj["metadata"].get("finalizers") or [] if f != finalizer]
        self._update_meta(rt.group_resource, obj, finalizers=fins)

    def _finalize(self, rt: ResourceType, obj: JSON) -> None:
        md = obj["metadata"]
        fins = md.get("finalizers") or []
        uid = md["uid"]
        if "orphan" in fins:
            for gr, dep in self.store.dependents(uid):
                refs = [r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
                self._update_meta(gr, dep, ownerReferences=refs)
            self._remove_finalizer(rt, obj, "orphan")
            return
        if "foregroundDeletion" in fins:
            blocking = False
            for gr, dep in self.store.dependents(uid):
                ref: JSON = next((r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") == uid), {})
                if not dep["metadata"].get("deletionTimestamp"):
                    self._delete(gr, dep, "Foreground")
                if ref.get("blockOwnerDeletion") and self.store.get(gr, dep["metadata"].get("namespace", ""), dep["metadata"]["name"]):
                    blocking = True
            if not blocking:
                self._remove_finalizer(rt, obj, "foregroundDeletion")
            return
        if rt.group_resource == NS_GR:
            self._finalize_namespace(rt, obj)
        elif rt.group_resource == CRD_GR and "customresourcecleanup.apiextensions.k8s.io" in fins:
            self._finalize_crd(rt, obj)

    def _finalize_namespace(self, rt: ResourceType, ns_obj: JSON) -> None:
        """One pass of kube's namespace controller (``NamespacedResourcesDeleter.Delete``): delete
        every object of the namespace (Background propagation; objects with finalizers only get a
        deletionTimestamp), record the outcome in the namespace's ``status.conditions``, and once
        nothing is left remove ``kubernetes`` from ``spec.finalizers`` (``/finalize``), which
        removes the namespace when ``metadata.finalizers`` is empty too. Deviation: kube re-checks
        a namespace with content left after ``15 s / 2 + 1`` seconds; the double every
        ``RETRY_SECONDS`` (tests wait less, the order of events is the same)."""
        name = ns_obj["metadata"]["name"]
        failures: list[str] = []
        for gr, obj in self.store.namespaced_items(name):
            try:
                self._delete(gr, obj)
            except ApiError as e:  # kube collects per-resource errors into a condition
                failures.append(f"{gr[1]}.{gr[0]}: {e.message}")
        remaining = self.store.namespaced_items(name)
        ns_obj = self._namespace_conditions(rt, ns_obj, remaining, failures)
        if remaining:
            return
        if (ns_obj.get("spec") or {}).get("finalizers"):
            new = dict(ns_obj)
            new["spec"] = {**(ns_obj.get("spec") or {}), "finalizers": []}
            self.rest.update(rt, "", name, new, WriteOptions(field_manager="namespace-controller"), subresource="finalize",
                             skip_unknown=True)
            ns_obj = self.store.get(NS_GR, "", name) or ns_obj
        if not ns_obj["metadata"].get("finalizers") and self.store.get(NS_GR, "", name) is not None:
            self.rest.remove_now(rt, ns_obj)

    def _namespace_conditions(self, rt: ResourceType, ns_obj: JSON, remaining: list[tuple[tuple[str, str], JSON]],
                              failures: list[str]) -> JSON:
        """Write the namespace deletion conditions (kube ``deletion/status_condition_utils.go``)
        when they changed; returns the namespace as stored."""
        counts: dict[str, int] = {}
        by_finalizer: dict[str, int] = {}
        for gr, obj in remaining:
            key = f"{gr[1]}.{gr[0]}"
            counts[key] = counts.get(key, 0) + 1
            for f in obj["metadata"].get("finalizers") or []:
                by_finalizer[f] = by_finalizer.get(f, 0) + 1
        failed: dict[str, tuple[str, str]] = {}
        if failures:
            failed[NS_CONTENT_FAILURE] = (
                "ContentDeletionFailed", f"Failed to delete all resource types, {len(failures)} remaining: {', '.join(sorted(failures))}")
        if counts:
            failed[NS_CONTENT_REMAINING] = ("SomeResourcesRemain", "Some resources are remaining: " + ", ".join(
                sorted(f"{k} has {n} resource instances" for k, n in counts.items())))
        if by_finalizer:
            failed[NS_FINALIZERS_REMAINING] = ("SomeFinalizersRemain", "Some content in the namespace has finalizers remaining: " + ", ".join(
                sorted(f"{f} in {n} resource instances" for f, n in by_finalizer.items())))
        now = self.rest.clock()
        old = {c.get("type"): c for c in (ns_obj.get("status") or {}).get("conditions") or []}
        conditions = [c for c in (ns_obj.get("status") or {}).get("conditions") or [] if c.get("type") not in NS_CONDITIONS]
        for ctype, (ok_reason, ok_message) in NS_CONDITIONS.items():
            status, reason, message = ("True", *failed[ctype]) if ctype in failed else ("False", ok_reason, ok_message)
            prev = old.get(ctype)
            since = prev.get("lastTransitionTime") if prev is not None and prev.get("status") == status else now
            conditions.append({"type": ctype, "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
        if conditions == (ns_obj.get("status") or {}).get("conditions"):
            return ns_obj
        new = dict(ns_obj)
        new["status"] = {**(ns_obj.get("status") or {}), "conditions": conditions}
        self.rest.update(rt, "", ns_obj["metadata"]["name"], new, WriteOptions(field_manager="namespace-controller"),
                         subresource="status", skip_unknown=True)
        return self.store.get(NS_GR, "", ns_obj["metadata"]["name"]) or ns_obj

    def _finalize_crd(self, rt: ResourceType, crd: JSON) -> None:
        spec = crd["spec"]
        gr = (spec["group"], spec["names"]["plural"])
        remaining = list(self.store.items(gr))
        for _, obj in remaining:
            self._delete(gr, obj)
        if self.store.count(gr) == 0:
            self._remove_finalizer(rt, crd, "customresourcecleanup.apiextensions.k8s.io")
