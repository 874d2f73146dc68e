"""Create, update, patch, delete of one resource: kube's generic registry store and strategies.

Source: k8s.io/apiserver ``pkg/registry/generic/registry/store.go`` (BeforeCreate/BeforeUpdate,
preconditions, graceful deletion with finalizers), ``pkg/registry/rest`` and the CRD strategy
(``apiextensions-apiserver/pkg/registry/customresource/strategy.go``): status subresource split,
generation bumped only on spec changes, status reset on create, no new finalizers while deleting.
"""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from . import builtin, errors, ssa
from . import schema as schema_mod
from .resources import ResourceType
from .store import Store
from .validation import meta_causes

JSON = dict[str, Any]

GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery names.SimpleNameGenerator
MANAGED_META = ("resourceVersion", "managedFields", "generation")


def now_rfc3339() -> str:
    """The current UTC time as RFC 3339 with seconds and ``Z`` (metav1.Time)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class WriteOptions:
    """Per-request write options: dryRun, fieldManager, fieldValidation, force, collected warnings."""

    def __init__(
        self,
        *,
        dry_run: bool = False,
        field_manager: str | None = None,
        field_validation: str = "Warn",
        force: bool = False,
        user_agent: str = "",
    ) -> None:
        self.dry_run = dry_run
        self.field_manager = field_manager
        self.field_validation = field_validation
        self.force = force
        self.user_agent = user_agent
        self.warnings: list[str] = []
        # Duplicate JSON keys seen while decoding the body; prefix of whole-object decode errors.
        self.duplicate_fields: list[str] = []
        self.decode_prefix = ""

    def manager(self) -> str:
        """fieldManager, or the User-Agent prefix before ``/`` as kube defaults it."""
        if self.field_manager:
            return self.field_manager
        return (self.user_agent.split("/", 1)[0] or "unknown")[:128]


def _strip_for_compare(obj: JSON) -> JSON:
    out = dict(obj)
    md = dict(out.get("metadata") or {})
    md.pop("resourceVersion", None)
    mf = md.pop("managedFields", None)
    if mf:
        md["managedFields"] = [{k: v for k, v in e.items() if k != "time"} for e in mf if isinstance(e, dict)]
    out["metadata"] = md
    return out


def _spec_view(obj: JSON, status_sub: bool) -> JSON:
    return {k: v for k, v in obj.items() if k != "metadata" and not (status_sub and k == "status")}


def _namespace_finalizers(rt: ResourceType, obj: JSON) -> list[str]:
    """A namespace's ``spec.finalizers`` (kube ShouldDeleteNamespaceDuringUpdate: a terminating
    namespace goes only when these and ``metadata.finalizers`` are empty); [] for other kinds."""
    if not (rt.builtin and rt.group == "" and rt.plural == "namespaces"):
        return []
    return list((obj.get("spec") or {}).get("finalizers") or [])


class Rest:
    """The write and read rules for every served resource, over one :class:`Store`."""

    def __init__(self, store: Store, clock: Callable[[], str] = now_rfc3339) -> None:
        self.store = store
        self.clock = clock
        # Hook run after a stored object enters deletion or is removed (garbage collector wake-up).
        self.on_change: list[Callable[[ResourceType, JSON], None]] = []
        # Per group resource: default/validate hook (obj, old) -> StatusCauses (CRD strategy).
        self.strategies: dict[tuple[str, str], Callable[[JSON, JSON | None], list[JSON]]] = {}

    # -- helpers -------------------------------------------------------------------------------

    def namespace_check(self, rt: ResourceType, ns: str, *, creating: bool, name: str = "") -> None:
        """404 when the namespace is missing; 403 when it is terminating (creates only).

        kube's NamespaceLifecycle admission plugin: a create in a namespace whose phase is
        ``Terminating`` is Forbidden with a StatusCause of type ``NamespaceTerminating`` on
        ``metadata.namespace``; updates, patches and deletes of existing objects stay allowed
        (controllers must still remove their finalizers)."""
        if not rt.namespaced:
            return
        nso = self.store.get(("", "namespaces"), "", ns)
        if nso is None:
            raise errors.not_found("", "namespaces", ns)
        if creating and nso["metadata"].get("deletionTimestamp"):
            err = errors.forbidden(
                rt.group, rt.plural, name,
                f"unable to create new content in namespace {ns} because it is being terminated",
            )
            err.details = {**(err.details or {}), "causes": [{
                "reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated", "field": "metadata.namespace",
            }]}
            raise err

    def _unknown_fields(self, rt: ResourceType, obj: JSON, opts: WriteOptions) -> None:
        """Prune unknown fields; Strict -> 400, Warn -> warnings (kube fieldValidation)."""
        unknown = builtin.unknown_top_level(rt, obj) if rt.builtin else []
        if not rt.builtin:
            md = obj.get("metadata")
            if isinstance(md, dict):
                unknown += [f"metadata.{k}" for k in md if k not in builtin.META_FIELDS]
        for path in unknown:
            if path.startswith("metadata."):
                obj["metadata"].pop(path.split(".", 1)[1], None)
            else:
                obj.pop(path, None)
        if not rt.builtin and rt.schema is not None:
            unknown += [p for p in schema_mod.prune(obj, rt.schema) if p not in unknown]
        problems = [f'duplicate field "{p}"' for p in opts.duplicate_fields]
        problems += [f'unknown field "{p}"' for p in unknown]
        opts.duplicate_fields = []
        if not problems:
            return
        if opts.field_validation == "Strict":
            raise errors.bad_request(opts.decode_prefix + "strict decoding error: " + ", ".join(problems))
        if opts.field_validation == "Warn":
            opts.warnings += problems

    def _validate(self, rt: ResourceType, obj: JSON, old: JSON | None) -> None:
        """Defaults then schema and metadata validation; 422 Invalid with causes."""
        causes: list[JSON] = []
        hook = self.strategies.get(rt.group_resource)
        if hook is not None:
            causes += hook(obj, old)
        if not rt.builtin and rt.schema is not None:
            schema_mod.apply_defaults(obj, rt.schema)
            causes += schema_mod.validate(obj, rt.schema, old=old)
        causes = meta_causes(obj["metadata"], label_name=rt.plural == "namespaces" and rt.group == "") + causes
        causes += builtin.size_causes(rt, obj)
        if old is not None and old["metadata"].get("deletionTimestamp"):
            new_f = [f for f in obj["metadata"].get("finalizers") or [] if f not in (old["metadata"].get("finalizers") or [])]
            if new_f:
                causes.append({
                    "reason": "FieldValueForbidden",
                    "message": "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{', '.join(json.dumps(f) for f in new_f)}}}",
                    "field": "metadata.finalizers",
                })
        if causes:
            raise errors.invalid(rt.group, rt.kind, obj["metadata"].get("name", ""), causes)

    def _managed_fields(self, old: JSON | None, new: JSON, opts: WriteOptions, operation: str, sub: str | None) -> None:
        ssa.update_managed_fields(old, new, manager=opts.manager(), operation=operation, subresource=sub,
                                  now=self.clock())

    def _check_identity(self, rt: ResourceType, ns: str, obj: JSON) -> None:
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
            raise errors.bad_request("Object 'metadata' is invalid")
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version ({rt.api_version})"
                if api_version != rt.api_version
                else f"{kind} in version \"{rt.version}\" cannot be handled as a {rt.kind}: "
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        md = obj.setdefault("metadata", {})
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            md["namespace"] = ns
        else:
            md.pop("namespace", None)

    # -- create --------------------------------------------------------------------------------

    def create(self, rt: ResourceType, ns: str, body: JSON, opts: WriteOptions, *, operation: str = "Update") -> JSON:
        """POST: store a new object; returns it. Raises ApiError (400, 403, 404, 409, 422)."""
        obj = body
        self._check_identity(rt, ns, obj)
        md = obj["metadata"]
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + "".join(random.choice(GENERATE_ALPHABET) for _ in range(5))
        self.namespace_check(rt, ns, creating=True, name=md.get("name") or "")
        if md.get("resourceVersion") and operation != "Apply":
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        self._unknown_fields(rt, obj, opts)
        for k in ("uid", "resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generation"):
            md.pop(k, None)
        if rt.status_subresource and rt.plural != "namespaces":
            obj.pop("status", None)
        builtin.prepare_write(rt, obj, None)
        builtin.check_event_shape(rt, obj)
        self._validate(rt, obj, None)
        if self.store.get(rt.group_resource, md.get("namespace", ""), md["name"]) is not None:
            raise errors.already_exists(rt.group, rt.plural, md["name"])
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = self.clock()
        if rt.has_generation:
            md["generation"] = 1
        if operation != "Apply":
            md.pop("managedFields", None)
            self._managed_fields(None, obj, opts, "Update", None)
        if opts.dry_run:
            return obj
        rv = self.store.next_rv()
        md["resourceVersion"] = str(rv)
        self.store.put(rt.group_resource, obj, rv)
        self._notify(rt, obj)
        return obj

    # -- update --------------------------------------------------------------------------------

    def get_or_404(self, rt: ResourceType, ns: str, name: str) -> JSON:
        """The stored object or 404 NotFound."""
        obj = self.store.get(rt.group_resource, ns if rt.namespaced else "", name)
        if obj is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return obj

    def update(self, rt: ResourceType, ns: str, name: str, body: JSON, opts: WriteOptions,
               *, subresource: str | None = None, operation: str = "Update", skip_unknown: bool = False) -> JSON:
        """PUT (also the tail of every patch): returns the stored object.

        Raises ApiError: 404 absent, 400 name/namespace mismatch, 409 stale resourceVersion or
        uid precondition, 422 invalid (including a missing resourceVersion for custom resources).
        """
        self._check_identity(rt, ns, body)
        md = body["metadata"]
        if md.get("name") and md["name"] != name:
            raise errors.bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
        md["name"] = name
        old = self.get_or_404(rt, ns, name)
        old_md = old["metadata"]
        rv = md.get("resourceVersion")
        if rv:
            if rv != old_md["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name)
        elif not rt.unconditional_update:
            raise errors.invalid(rt.group, rt.kind, name, [{
                "reason": "FieldValueInvalid",
                "message": "Invalid value: 0x0: must be specified for an update",
                "field": "metadata.resourceVersion",
            }])
        if md.get("uid") and md["uid"] != old_md["uid"]:
            raise errors.conflict(rt.group, rt.plural, name,
                                  f"Precondition failed: UID in precondition: {md['uid']}, UID in object meta: {old_md['uid']}")
        if not skip_unknown:
            self._unknown_fields(rt, body, opts)
        new = self._merge_subresource(rt, old, body, subresource)
        nmd = new["metadata"]
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if k in old_md:
                nmd[k] = old_md[k]
            else:
                nmd.pop(k, None)
        nmd.pop("selfLink", None)
        if "managedFields" not in nmd and "managedFields" in old_md:
            nmd["managedFields"] = old_md["managedFields"]
        builtin.prepare_write(rt, new, old)
        self._validate(rt, new, old)
        if rt.has_generation and _spec_view(new, rt.status_subresource) != _spec_view(old, rt.status_subresource):
            nmd["generation"] = int(old_md.get("generation") or 0) + 1
        if operation != "Apply":
            self._managed_fields(old, new, opts, "Update", subresource)
        nmd["resourceVersion"] = old_md["resourceVersion"]
        if _strip_for_compare(new) == _strip_for_compare(old):
            return old  # no-op writes do not bump resourceVersion nor emit events
        if opts.dry_run:
            return new
        if nmd.get("deletionTimestamp") and not nmd.get("finalizers") and not _namespace_finalizers(rt, new):
            return self._remove(rt, new)
        rvn = self.store.next_rv()
        nmd["resourceVersion"] = str(rvn)
        self.store.put(rt.group_resource, new, rvn)
        self._notify(rt, new)
        return new

    @staticmethod
    def _merge_subresource(rt: ResourceType, old: JSON, body: JSON, subresource: str | None) -> JSON:
        """Main endpoint keeps the old status; ``/status`` keeps everything but status;
        a namespace's ``/finalize`` changes only ``spec.finalizers``."""
        if subresource == "finalize":
            new = dict(old)
            new["metadata"] = dict(old["metadata"])
            new["spec"] = {**(old.get("spec") or {}), "finalizers": (body.get("spec") or {}).get("finalizers") or []}
            return new
        if subresource == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            new["metadata"] = dict(old["metadata"])
            if "managedFields" in body["metadata"]:
                new["metadata"]["managedFields"] = body["metadata"]["managedFields"]
            if "status" in body:
                new["status"] = body["status"]
            return new
        new = dict(body)
        if rt.status_subresource:
            if "status" in old:
                new["status"] = old["status"]
            else:
                new.pop("status", None)
        return new

    # -- delete --------------------------------------------------------------------------------

    def delete(self, rt: ResourceType, ns: str, name: str, options: JSON, opts: WriteOptions) -> tuple[JSON, bool]:
        """DELETE with DeleteOptions; returns (object or Status, deleted_now).

        Finalizers (including ``foregroundDeletion``/``orphan`` added by propagationPolicy) keep
        the object with ``deletionTimestamp`` set; otherwise it is removed. Raises 404, 409
        (preconditions), 400 (unknown propagationPolicy).
        """
        obj = self.get_or_404(rt, ns, name)
        md = obj["metadata"]
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != md["uid"]:
            raise errors.conflict(rt.group, rt.plural, name,
                                  f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {md['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != md["resourceVersion"]:
            raise errors.conflict(rt.group, rt.plural, name,
                                  f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                                  f"ResourceVersion in object meta: {md['resourceVersion']}")
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Foreground", "Background", "Orphan"):
            raise errors.invalid(rt.group, rt.kind, name, [{
                "reason": "FieldValueNotSupported",
                "message": f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"',
                "field": "propagationPolicy",
            }])
        finalizers = list(md.get("finalizers") or [])
        if policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        cleanup = "customresourcecleanup.apiextensions.k8s.io"
        if rt.group_resource == ("apiextensions.k8s.io", "customresourcedefinitions") and cleanup not in finalizers:
            finalizers.append(cleanup)
        if rt.builtin and rt.group == "" and rt.plural == "namespaces":
            if name in ("default", "kube-system", "kube-public"):
                # kube's NamespaceLifecycle admission plugin protects the immortal namespaces.
                raise errors.forbidden("", "namespaces", name, "this namespace may not be deleted")
            return self._delete_namespace(rt, obj, finalizers, opts), False
        if not finalizers:
            if opts.dry_run:
                return obj, True
            final = self._remove(rt, obj)
            if rt.returns_deleted_object:
                return final, True
            return errors.success_status(name, rt.group, rt.plural, md["uid"]), True
        new = dict(obj)
        new["metadata"] = nmd = dict(md)
        nmd["finalizers"] = finalizers
        if not md.get("deletionTimestamp") and md.get("generation"):
            # registry store markAsDeleting: entering deletion bumps generation.
            nmd["generation"] = int(md["generation"]) + 1
        nmd.setdefault("deletionTimestamp", self.clock())
        nmd.setdefault("deletionGracePeriodSeconds", 0)
        hook = self.strategies.get(rt.group_resource)
        if hook is not None:  # e.g. the CRD's Terminating condition
            hook(new, obj)
        if _strip_for_compare(new) == _strip_for_compare(obj) or opts.dry_run:
            return (obj if not opts.dry_run else new), False
        rv = self.store.next_rv()
        nmd["resourceVersion"] = str(rv)
        self.store.put(rt.group_resource, new, rv)
        self._notify(rt, new)
        return new, False

    def _delete_namespace(self, rt: ResourceType, obj: JSON, finalizers: list[str], opts: WriteOptions) -> JSON:
        """kube's namespace storage Delete: the first DELETE only sets deletionTimestamp and phase
        ``Terminating`` (the namespace controller then empties it and removes its ``kubernetes``
        finalizer from ``spec.finalizers``); a DELETE of a terminating namespace whose
        ``spec.finalizers`` and ``metadata.finalizers`` are empty removes it."""
        if obj["metadata"].get("deletionTimestamp") and not _namespace_finalizers(rt, obj) and not obj["metadata"].get("finalizers"):
            return obj if opts.dry_run else self._remove(rt, obj)
        new = copy.deepcopy(obj)
        nmd = new["metadata"]
        nmd.setdefault("deletionTimestamp", self.clock())
        nmd.setdefault("deletionGracePeriodSeconds", 0)
        if finalizers:
            nmd["finalizers"] = finalizers
        new.setdefault("status", {})["phase"] = "Terminating"
        if new == obj or opts.dry_run:
            return new
        rv = self.store.next_rv()
        nmd["resourceVersion"] = str(rv)
        self.store.put(rt.group_resource, new, rv)
        self._notify(rt, new)
        return new

    def _remove(self, rt: ResourceType, obj: JSON) -> JSON:
        """Remove now: the DELETED event carries the final state at a fresh resourceVersion."""
        final = dict(obj)
        final["metadata"] = dict(obj["metadata"])
        rv = self.store.next_rv()
        final["metadata"]["resourceVersion"] = str(rv)
        self.store.remove(rt.group_resource, final, rv)
        self._notify(rt, final)
        return final

    def remove_now(self, rt: ResourceType, obj: JSON) -> JSON:
        """Remove ``obj`` regardless of finalizers (namespace/CRD cleanup of the last step)."""
        return self._remove(rt, obj)

    def _notify(self, rt: ResourceType, obj: JSON) -> None:
        for cb in self.on_change:
            cb(rt, obj)
