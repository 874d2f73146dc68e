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
        name = ns_obj["metadata"]["name"]
        content = self.store.namespaced_items(name)
        for gr, obj in content:
            self._delete(gr, obj)
        if self.store.namespaced_items(name):
            return
        spec_fins = (ns_obj.get("spec") or {}).get("finalizers") or []
        if spec_fins:
            new = dict(ns_obj)
            new["spec"] = {**(ns_obj.get("spec") or {}), "finalizers": []}
            self.rest.update(rt, "", name, new, WriteOptions(field_manager="namespace-controller"), subresource=None,
                             skip_unknown=True)
            ns_obj = self.store.get(NS_GR, "", name) or ns_obj
        if not ns_obj["metadata"].get("finalizers") and self.store.get(NS_GR, "", name) is not None:
            self.rest.remove_now(rt, ns_obj)

    def _finalize_crd(self, rt: ResourceType, crd: JSON) -> None:
        spec = crd["spec"]
        gr = (spec["group"], spec["names"]["plural"])
        remaining = list(self.store.items(gr))
        for _, obj in remaining:
            self._delete(gr, obj)
        if self.store.count(gr) == 0:
            self._remove_finalizer(rt, crd, "customresourcecleanup.apiextensions.k8s.io")
