"""The builtin kinds the double serves and their per-kind write rules (registry strategies).

Served: core/v1 namespaces, configmaps, secrets, events, serviceaccounts; events.k8s.io/v1
events; coordination.k8s.io/v1 leases; apiextensions.k8s.io/v1 customresourcedefinitions; stored
but not enforced: rbac.authorization.k8s.io/v1 roles and bindings, admissionregistration.k8s.io/v1
ValidatingAdmissionPolicy(Binding); authorization.k8s.io/v1 access reviews (always allowed).
Per-kind rules follow kube's ``pkg/registry/core/<kind>/strategy.go``: secrets merge
``stringData`` into base64 ``data`` and default ``type: Opaque``; namespaces get
``spec.finalizers: [kubernetes]`` and ``status.phase: Active``; immutable configmaps/secrets
refuse data changes; secrets and configmaps hold at most 1 MiB of data (``size_causes``); extra field selectors per kind (``type`` on secrets,
``involvedObject.*`` on events).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from .errors import ApiError, bad_request, invalid
from .resources import ResourceType

JSON = dict[str, Any]

META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
_BASE = frozenset({"apiVersion", "kind", "metadata"})


def builtin_types() -> list[ResourceType]:
    """Every builtin resource type (fresh objects, safe to mutate)."""
    return [
        ResourceType(
            "", "v1", "namespaces", "namespace", "Namespace", False, short_names=["ns"],
            status_subresource=True, returns_deleted_object=True,
            top_level_fields=_BASE | {"spec", "status"},
        ),
        ResourceType(
            "", "v1", "configmaps", "configmap", "ConfigMap", True, short_names=["cm"],
            top_level_fields=_BASE | {"data", "binaryData", "immutable"},
        ),
        ResourceType(
            "", "v1", "secrets", "secret", "Secret", True,
            top_level_fields=_BASE | {"data", "stringData", "type", "immutable"},
        ),
        ResourceType(
            "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, short_names=["sa"],
            top_level_fields=_BASE | {"secrets", "imagePullSecrets", "automountServiceAccountToken"},
        ),
        ResourceType(
            "", "v1", "events", "event", "Event", True, short_names=["ev"],
            top_level_fields=_BASE | {
                "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp",
                "count", "type", "eventTime", "series", "action", "related", "reportingComponent",
                "reportingInstance",
            },
        ),
        ResourceType(
            "events.k8s.io", "v1", "events", "event", "Event", True, short_names=["ev"],
            storage_group_resource=("", "events"),
            top_level_fields=_BASE | {
                "eventTime", "series", "reportingController", "reportingInstance", "action", "reason",
                "regarding", "related", "note", "type", "deprecatedSource", "deprecatedFirstTimestamp",
                "deprecatedLastTimestamp", "deprecatedCount",
            },
        ),
        ResourceType(
            "coordination.k8s.io", "v1", "leases", "lease", "Lease", True,
            top_level_fields=_BASE | {"spec"},
        ),
        # RBAC objects are stored (so manifests apply) but not enforced: the double has no authz.
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", False,
            top_level_fields=_BASE | {"rules", "aggregationRule"},
        ),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding",
            False, top_level_fields=_BASE | {"subjects", "roleRef"},
        ),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True,
            top_level_fields=_BASE | {"rules"},
        ),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", True,
            top_level_fields=_BASE | {"subjects", "roleRef"},
        ),
        # Admission policies are stored but not enforced (no CEL admission in the double).
        ResourceType(
            "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy", False, status_subresource=True, has_generation=True,
            top_level_fields=_BASE | {"spec", "status"},
        ),
        ResourceType(
            "admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding", "ValidatingAdmissionPolicyBinding", False, has_generation=True,
            top_level_fields=_BASE | {"spec"},
        ),
        ResourceType(
            "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview",
            "SelfSubjectAccessReview", False, verbs=["create"], top_level_fields=_BASE | {"spec", "status"},
        ),
        ResourceType(
            "authorization.k8s.io", "v1", "subjectaccessreviews", "subjectaccessreview",
            "SubjectAccessReview", False, verbs=["create"], top_level_fields=_BASE | {"spec", "status"},
        ),
        ResourceType(
            "apiextensions.k8s.io", "v1", "customresourcedefinitions", "customresourcedefinition",
            "CustomResourceDefinition", False, short_names=["crd", "crds"], categories=["api-extensions"],
            status_subresource=True, has_generation=True, returns_deleted_object=True,
            top_level_fields=_BASE | {"spec", "status"},
        ),
    ]


def _event_field(path: str) -> Callable[[dict[str, Any]], str]:
    def get(obj: dict[str, Any]) -> str:
        cur: Any = obj
        for part in path.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        return "" if cur is None else str(cur)

    return get


REVIEW_KINDS = frozenset({"selfsubjectaccessreviews", "subjectaccessreviews"})


def review(body: JSON) -> JSON:
    """Answer an access review: the double has no authorization, so everything is allowed."""
    out = dict(body)
    out["metadata"] = {k: v for k, v in (body.get("metadata") or {}).items() if k in ("name", "generateName")}
    out["status"] = {"allowed": True, "reason": "the API-server double performs no authorization"}
    return out


def extra_field_selectors(rt: ResourceType) -> dict[str, Callable[[dict[str, Any]], str]]:
    """Kind-specific field selector labels (kube's ``<kind>.GetAttrs``/field label conversions;
    for custom resources the CRD version's ``selectableFields``)."""
    if not rt.builtin:
        return {f: _event_field(f) for f in rt.selectable_fields}
    if rt.builtin and rt.plural == "secrets":
        return {"type": _event_field("type")}
    if rt.builtin and rt.plural == "namespaces":
        return {"status.phase": _event_field("status.phase")}
    if rt.builtin and rt.plural == "events" and rt.group == "":
        fields = [
            "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
            "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
            "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
        ]
        out = {f: _event_field(f) for f in fields}
        out["source"] = _event_field("source.component")
        return out
    if rt.builtin and rt.plural == "events":
        fields = [
            "regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
            "regarding.apiVersion", "regarding.resourceVersion", "regarding.fieldPath", "reason",
            "reportingController", "type",
        ]
        return {f: _event_field(f) for f in fields}
    return {}


def _check_base64(rt: ResourceType, data: Any) -> None:
    if not isinstance(data, dict):
        return
    for k, v in data.items():
        if not isinstance(v, str):
            raise bad_request(f"{rt.kind} in version \"v1\" cannot be handled as a {rt.kind}: data[{k}] must be a base64 string")
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError) as e:
            raise bad_request(
                f"{rt.kind} in version \"v1\" cannot be handled as a {rt.kind}: illegal base64 data at input byte {e}"
            ) from e


def prepare_write(rt: ResourceType, obj: JSON, old: JSON | None) -> None:
    """Apply the kind's normalisation to ``obj`` in place before validation and storage.

    Raises ApiError (400 for undecodable secret data, 422 for changes to immutable data).
    """
    if not rt.builtin:
        return
    if rt.group == "" and rt.plural in ("configmaps", "secrets"):
        for f in ("data", "stringData"):
            values = obj.get(f)
            for v in values.values() if isinstance(values, dict) else ():
                if not isinstance(v, str):
                    json_type = "bool" if isinstance(v, bool) else "number" if isinstance(v, int | float) else (
                        "object" if isinstance(v, dict) else "array" if isinstance(v, list) else "null")
                    raise bad_request(
                        f'{rt.kind} in version "v1" cannot be handled as a {rt.kind}: json: cannot unmarshal '
                        f"{json_type} into Go struct field {rt.kind}.{f} of type string")
    if rt.group == "" and rt.plural == "secrets":
        _check_base64(rt, obj.get("data"))
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict) and string_data:
            data = dict(obj.get("data") or {})
            for k, v in string_data.items():
                data[k] = base64.b64encode(str(v).encode()).decode()
            obj["data"] = data
        obj.setdefault("type", "Opaque")
        if old is not None and old.get("type") != obj.get("type"):
            raise invalid("", rt.kind, obj["metadata"].get("name", ""), [
                {"reason": "FieldValueInvalid", "message": f'Invalid value: "{obj.get("type")}": field is immutable', "field": "type"}
            ])
    if rt.group == "" and rt.plural in ("secrets", "configmaps") and old is not None and old.get("immutable"):
        for f in ("data", "binaryData"):
            if (old.get(f) or {}) != (obj.get(f) or {}):
                raise invalid("", rt.kind, obj["metadata"].get("name", ""), [
                    {"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable when `immutable` is set", "field": f}
                ])
        if not obj.get("immutable"):
            raise invalid("", rt.kind, obj["metadata"].get("name", ""), [
                {"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable when `immutable` is set", "field": "immutable"}
            ])
    if rt.group == "" and rt.plural == "namespaces":
        spec = obj.setdefault("spec", {})
        if old is None:
            spec.setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        if "kubernetes.io/metadata.name" not in (obj["metadata"].get("labels") or {}):
            labels = dict(obj["metadata"].get("labels") or {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
            obj["metadata"]["labels"] = labels


MAX_SECRET_SIZE = 1024 * 1024
"""Bytes: kube ``api.MaxSecretSize`` (1 MiB), the limit on a Secret's decoded ``data`` and on a
ConfigMap's ``data`` plus decoded ``binaryData`` (pkg/apis/core/validation ValidateSecret,
ValidateConfigMap)."""


def _decoded_len(value: Any) -> int:
    """Bytes of a base64 wire value (already checked by ``prepare_write``; 0 when not a string)."""
    if not isinstance(value, str):
        return 0
    try:
        return len(base64.b64decode(value, validate=True))
    except (binascii.Error, ValueError):
        return len(value)


def size_causes(rt: ResourceType, obj: JSON) -> list[JSON]:
    """StatusCauses for a Secret or ConfigMap over ``MAX_SECRET_SIZE`` bytes (others: none).

    Secret: the decoded bytes of every ``data`` value (after ``stringData`` is merged), cause field
    ``data``: ``Secret "x" is invalid: data: Too long: must have at most 1048576 bytes``.
    ConfigMap: UTF-8 bytes of ``data`` values plus decoded ``binaryData``; kube reports it on the
    whole object (``field.NewPath("")``), which its message prints as ``[]``:
    ``ConfigMap "x" is invalid: []: Too long: must have at most 1048576 bytes``.
    """
    if not rt.builtin or rt.group != "" or rt.plural not in ("secrets", "configmaps"):
        return []
    raw_data, raw_binary = obj.get("data"), obj.get("binaryData")
    data: JSON = raw_data if isinstance(raw_data, dict) else {}
    field = "data"
    total = sum(_decoded_len(v) for v in data.values())
    if rt.plural == "configmaps":
        binary: JSON = raw_binary if isinstance(raw_binary, dict) else {}
        total = sum(len(v.encode()) for v in data.values() if isinstance(v, str))
        total += sum(_decoded_len(v) for v in binary.values())
        field = "[]"
    if total <= MAX_SECRET_SIZE:
        return []
    return [{"reason": "FieldValueTooLong", "message": f"Too long: must have at most {MAX_SECRET_SIZE} bytes", "field": field}]


def check_event_shape(rt: ResourceType, obj: JSON) -> None:
    """events.k8s.io/v1 requires eventTime and reportingController (kube ValidateEventCreate)."""
    if rt.builtin and rt.group == "events.k8s.io":
        causes = []
        if not obj.get("eventTime"):
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "eventTime"})
        if not obj.get("reportingController"):
            causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": "reportingController"})
        if causes:
            raise invalid("events.k8s.io", "Event", obj["metadata"].get("name", ""), causes)


def unknown_top_level(rt: ResourceType, obj: JSON) -> list[str]:
    """Paths of fields a builtin kind does not know (top level and metadata)."""
    out = [k for k in obj if rt.top_level_fields and k not in rt.top_level_fields]
    md = obj.get("metadata")
    if isinstance(md, dict):
        out += [f"metadata.{k}" for k in md if k not in META_FIELDS]
    return out


__all__ = [
    "MAX_SECRET_SIZE", "ApiError", "builtin_types", "check_event_shape", "extra_field_selectors", "prepare_write",
    "size_causes", "unknown_top_level",
]
