"""OpenAPI documents served at ``/openapi/v2`` and ``/openapi/v3`` (index and per group/version).

What kubectl reads from them, and so what must be right:

- ``kubectl explain`` (OpenAPI v3): ``/openapi/v3`` index -> ``serverRelativeURL`` of the
  group/version -> the ``components.schemas`` entry whose ``x-kubernetes-group-version-kind``
  lists the GVK; fields and descriptions follow ``$ref`` (kube wraps refs as ``allOf: [$ref]``).
- ``kubectl apply/create`` field validation: kubectl's ``QueryParamVerifierV3`` looks for a path
  whose PATCH operation has ``x-kubernetes-group-version-kind`` (an object) equal to the GVK and a
  ``fieldValidation`` parameter; then it sends ``fieldValidation=Strict`` and lets the server
  reject unknown fields. Without it kubectl falls back to client-side validation with v2.

Definition names follow kube: ``io.k8s.api.core.v1.ConfigMap`` for builtins and, for CRDs
(apiextensions-apiserver ``controller/openapi/builder``), the reversed group then version and kind:
``io.banlieue.v1alpha1.VirtualMachine``. Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["crd_definition_name", "openapi_v2", "openapi_v3_doc", "openapi_v3_index"]

JSON = dict[str, Any]
INFO = {"title": "Kubernetes", "version": "v1.32.0"}
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META = META + "ObjectMeta"
LIST_META = META + "ListMeta"
PATCH = META + "Patch"
STATUS = META + "Status"
DELETE_OPTIONS = META + "DeleteOptions"
_API_VERSION_DESC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DESC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More "
    "info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_META_DESC = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


@dataclass(frozen=True)
class _Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool
    definition: str
    custom: bool = False
    """True for a CustomResourceDefinition's resource: its PATCH takes no strategic merge."""

    @property
    def gvk(self) -> JSON:
        return {"group": self.group, "kind": self.kind, "version": self.version}

    @property
    def prefix(self) -> str:
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"


def crd_definition_name(group: str, version: str, kind: str) -> str:
    """``io.banlieue.v1alpha1.VirtualMachine`` for group ``banlieue.io`` (reversed group)."""
    return ".".join([*reversed(group.split(".")), version, kind])


def _crd_versions(crds: Iterable[JSON]) -> Iterable[tuple[JSON, JSON]]:
    for crd in crds:
        for v in (crd.get("spec") or {}).get("versions") or []:
            if v.get("served", True):
                yield crd, v


def _crd_resources(crds: Iterable[JSON]) -> list[tuple[_Resource, JSON]]:
    out = []
    for crd, v in _crd_versions(crds):
        spec = crd["spec"]
        names = spec.get("names") or {}
        kind = names.get("kind", "")
        res = _Resource(
            spec.get("group", ""), v.get("name", ""), kind, names.get("plural", ""),
            spec.get("scope", "Namespaced") == "Namespaced",
            "status" in (v.get("subresources") or spec.get("subresources") or {}),
            crd_definition_name(spec.get("group", ""), v.get("name", ""), kind),
            custom=True,
        )  # fmt: skip
        out.append((res, (v.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"}))
    return out


# --- builtin definitions (neutral form: "$ref" holds a definition name) ------------------------


def _s(desc: str, fmt: str = "") -> JSON:
    d: JSON = {"type": "string", "description": desc}
    if fmt:
        d["format"] = fmt
    return d


def _i(desc: str, fmt: str = "int32") -> JSON:
    return {"type": "integer", "format": fmt, "description": desc}


def _b(desc: str) -> JSON:
    return {"type": "boolean", "description": desc}


def _r(name: str, desc: str) -> JSON:
    return {"$ref": name, "description": desc}


def _strmap(desc: str) -> JSON:
    return {"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": desc}


def _arr(items: JSON, desc: str, **ext: Any) -> JSON:
    return {"type": "array", "items": items, "description": desc, **ext}


def _kind(desc: str, props: JSON, gvk: tuple[str, str, str] | None, required: list[str] | None = None) -> JSON:
    d: JSON = {"description": desc, "type": "object", "properties": props}
    if gvk is not None:
        d["properties"] = {
            "apiVersion": {"type": "string", "description": _API_VERSION_DESC},
            "kind": {"type": "string", "description": _KIND_DESC},
            "metadata": _r(OBJECT_META, _META_DESC),
            **props,
        }
        d["x-kubernetes-group-version-kind"] = [{"group": gvk[0], "kind": gvk[2], "version": gvk[1]}]
    if required:
        d["required"] = required
    d["properties"] = dict(sorted(d["properties"].items()))
    return d


_CORE = "io.k8s.api.core.v1."
_TIME = META + "Time"
_MICRO = META + "MicroTime"

BUILTIN_DEFS: dict[str, JSON] = {
    META + "Time": {"type": "string", "format": "date-time",
                    "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON."},
    META + "MicroTime": {"type": "string", "format": "date-time", "description": "MicroTime is version of Time with microsecond level precision."},
    META + "FieldsV1": {"type": "object", "description": "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format."},
    META + "Patch": {"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."},
    META + "ObjectMeta": _kind(
        "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        {
            "annotations": _strmap("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
            "creationTimestamp": _r(_TIME, "CreationTimestamp is a timestamp representing the server time when this object was created."),
            "deletionGracePeriodSeconds": _i("Number of seconds allowed for this object to gracefully terminate before it will be removed from the system.", "int64"),
            "deletionTimestamp": _r(_TIME, "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."),
            "finalizers": _arr({"type": "string", "default": ""}, "Must be empty before the object is deleted from the registry.",
                               **{"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"}),
            "generateName": _s("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "generation": _i("A sequence number representing a specific generation of the desired state.", "int64"),
            "labels": _strmap("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "managedFields": _arr(_r(META + "ManagedFieldsEntry", ""), "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow.",
                                  **{"x-kubernetes-list-type": "atomic"}),
            "name": _s("Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically."),
            "namespace": _s("Namespace defines the space within which each name must be unique. An empty namespace is equivalent to the \"default\" namespace."),
            "ownerReferences": _arr(_r(META + "OwnerReference", ""), "List of objects depended by this object.",
                                    **{"x-kubernetes-list-map-keys": ["uid"], "x-kubernetes-list-type": "map",
                                       "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge"}),
            "resourceVersion": _s("An opaque value that represents the internal version of this object that can be used by clients to determine when objects have changed."),
            "selfLink": _s("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
            "uid": _s("UID is the unique in time and space value for this object."),
        },
        None,
    ),
    META + "ListMeta": _kind(
        "ListMeta describes metadata that synthetic resources must have, including lists and various status objects.",
        {
            "continue": _s("continue may be set if the user set a limit on the number of items returned."),
            "remainingItemCount": _i("remainingItemCount is the number of subsequent items in the list which are not included in this list response.", "int64"),
            "resourceVersion": _s("String that identifies the server's internal version of this object."),
            "selfLink": _s("Deprecated: selfLink is a legacy read-only field that is no longer populated by the system."),
        },
        None,
    ),
    META + "OwnerReference": _kind(
        "OwnerReference contains enough information to let you identify an owning object.",
        {
            "apiVersion": _s("API version of the referent."),
            "blockOwnerDeletion": _b("If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the owner cannot be deleted from the key-value store until this reference is removed."),
            "controller": _b("If true, this reference points to the managing controller."),
            "kind": _s("Kind of the referent."),
            "name": _s("Name of the referent."),
            "uid": _s("UID of the referent."),
        },
        None,
        ["apiVersion", "kind", "name", "uid"],
    ),
    META + "ManagedFieldsEntry": _kind(
        "ManagedFieldsEntry is a workflow-id, a FieldSet and the group version of the resource that the fieldset applies to.",
        {
            "apiVersion": _s("APIVersion defines the version of this resource that this field set applies to."),
            "fieldsType": _s("FieldsType is the discriminator for the different fields format and version."),
            "fieldsV1": _r(META + "FieldsV1", "FieldsV1 holds the first JSON version format as described in the \"FieldsV1\" type."),
            "manager": _s("Manager is an identifier of the workflow managing these fields."),
            "operation": _s("Operation is the type of operation which lead to this ManagedFieldsEntry being created."),
            "subresource": _s("Subresource is the name of the subresource used to update that object."),
            "time": _r(_TIME, "Time is the timestamp of when the ManagedFields entry was added."),
        },
        None,
    ),
    META + "StatusCause": _kind(
        "StatusCause provides more information about an api.Status failure, including cases when multiple errors are encountered.",
        {"field": _s("The field of the resource that has caused this error, as named by its JSON serialization."),
         "message": _s("A human-readable description of the cause of the error."),
         "reason": _s("A machine-readable description of the cause of the error.")},
        None,
    ),
    META + "StatusDetails": _kind(
        "StatusDetails is a set of additional properties that MAY be set by the server to provide additional information about a response.",
        {"causes": _arr(_r(META + "StatusCause", ""), "The Causes array includes more details associated with the StatusReason failure."),
         "group": _s("The group attribute of the resource associated with the status StatusReason."),
         "kind": _s("The kind attribute of the resource associated with the status StatusReason."),
         "name": _s("The name attribute of the resource associated with the status StatusReason."),
         "retryAfterSeconds": _i("If specified, the time in seconds before the operation should be retried."),
         "uid": _s("UID of the resource.")},
        None,
    ),
    META + "Status": {
        **_kind(
            "Status is a return value for calls that don't return other objects.",
            {"apiVersion": _s(_API_VERSION_DESC), "code": _i("Suggested HTTP return code for this status, 0 if not set."),
             "details": _r(META + "StatusDetails", "Extended data associated with the reason."),
             "kind": _s(_KIND_DESC), "message": _s("A human-readable description of the status of this operation."),
             "metadata": _r(LIST_META, "Standard list metadata."),
             "reason": _s("A machine-readable description of why this operation is in the \"Failure\" status."),
             "status": _s("Status of the operation. One of: \"Success\" or \"Failure\".")},
            None,
        ),
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "Status", "version": "v1"}],
    },
    META + "DeleteOptions": {
        **_kind(
            "DeleteOptions may be provided when deleting an API object.",
            {"apiVersion": _s(_API_VERSION_DESC), "kind": _s(_KIND_DESC),
             "dryRun": _arr({"type": "string", "default": ""}, "When present, indicates that modifications should not be persisted."),
             "gracePeriodSeconds": _i("The duration in seconds before the object should be deleted.", "int64"),
             "propagationPolicy": _s("Whether and how garbage collection will be performed.")},
            None,
        ),
        "x-kubernetes-group-version-kind": [{"group": "", "kind": "DeleteOptions", "version": "v1"}],
    },
    _CORE + "ObjectReference": _kind(
        "ObjectReference contains enough information to let you inspect or modify the referred object.",
        {"apiVersion": _s("API version of the referent."), "fieldPath": _s("If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement."),
         "kind": _s("Kind of the referent."), "name": _s("Name of the referent."), "namespace": _s("Namespace of the referent."),
         "resourceVersion": _s("Specific resourceVersion to which this reference is made, if any."), "uid": _s("UID of the referent.")},
        None,
    ),
    _CORE + "LocalObjectReference": _kind(
        "LocalObjectReference contains enough information to let you locate the referenced object inside the same namespace.",
        {"name": _s("Name of the referent.")},
        None,
    ),
    _CORE + "EventSource": _kind(
        "EventSource contains information for an event.",
        {"component": _s("Component from which the event is generated."), "host": _s("Node name on which the event is generated.")},
        None,
    ),
    _CORE + "EventSeries": _kind(
        "EventSeries contain information on series of events, i.e. thing that was/is happening continuously for some time.",
        {"count": _i("Number of occurrences in this series up to the last heartbeat time"),
         "lastObservedTime": _r(_MICRO, "Time of the last occurrence observed")},
        None,
    ),
    _CORE + "NamespaceSpec": _kind(
        "NamespaceSpec describes the attributes on a Namespace.",
        {"finalizers": _arr({"type": "string", "default": ""}, "Finalizers is an opaque list of values that must be empty to permanently remove object from storage.",
                            **{"x-kubernetes-list-type": "atomic"})},
        None,
    ),
    _CORE + "NamespaceStatus": _kind(
        "NamespaceStatus is information about the current status of a Namespace.",
        {"phase": {**_s("Phase is the current lifecycle phase of the namespace."), "enum": ["Active", "Terminating"]}},
        None,
    ),
    _CORE + "Namespace": _kind(
        "Namespace provides a scope for Names. Use of multiple namespaces is optional.",
        {"spec": _r(_CORE + "NamespaceSpec", "Spec defines the behavior of the Namespace."),
         "status": _r(_CORE + "NamespaceStatus", "Status describes the current status of a Namespace.")},
        ("", "v1", "Namespace"),
    ),
    _CORE + "ConfigMap": _kind(
        "ConfigMap holds configuration data for pods to consume.",
        {"binaryData": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                        "description": "BinaryData contains the binary data. Each key must consist of alphanumeric characters, '-', '_' or '.'."},
         "data": _strmap("Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'."),
         "immutable": _b("Immutable, if set to true, ensures that data stored in the ConfigMap cannot be updated (only object metadata can be modified).")},
        ("", "v1", "ConfigMap"),
    ),
    _CORE + "Secret": _kind(
        "Secret holds secret data of a certain type. The total bytes of the values in the Data field must be less than MaxSecretSize bytes.",
        {"data": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"},
                  "description": "Data contains the secret data. The serialized form of the secret data is a base64 encoded string."},
         "immutable": _b("Immutable, if set to true, ensures that data stored in the Secret cannot be updated (only object metadata can be modified)."),
         "stringData": _strmap("stringData allows specifying non-binary secret data in string form. It is provided as a write-only input field for convenience."),
         "type": _s("Used to facilitate programmatic handling of secret data.")},
        ("", "v1", "Secret"),
    ),
    _CORE + "ServiceAccount": _kind(
        "ServiceAccount binds together: * a name, understood by users, and perhaps by peripheral systems, for an identity * a principal that can be authenticated and authorized * a set of secrets",
        {"automountServiceAccountToken": _b("AutomountServiceAccountToken indicates whether pods running as this service account should have an API token automatically mounted."),
         "imagePullSecrets": _arr(_r(_CORE + "LocalObjectReference", ""), "ImagePullSecrets is a list of references to secrets in the same namespace to use for pulling any images."),
         "secrets": _arr(_r(_CORE + "ObjectReference", ""), "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.")},
        ("", "v1", "ServiceAccount"),
    ),
    _CORE + "Event": _kind(
        "Event is a report of an event somewhere in the cluster.",
        {"action": _s("What action was taken/failed regarding to the Regarding object."),
         "count": _i("The number of times this event has occurred."),
         "eventTime": _r(_MICRO, "Time when this Event was first observed."),
         "firstTimestamp": _r(_TIME, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
         "involvedObject": _r(_CORE + "ObjectReference", "The object that this event is about."),
         "lastTimestamp": _r(_TIME, "The time at which the most recent occurrence of this event was recorded."),
         "message": _s("A human-readable description of the status of this operation."),
         "reason": _s("This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
         "related": _r(_CORE + "ObjectReference", "Optional secondary object for more complex actions."),
         "reportingComponent": _s("Name of the controller that emitted this Event, e.g. `kubernetes.io/kubelet`."),
         "reportingInstance": _s("ID of the controller instance, e.g. `kubelet-xyzf`."),
         "series": _r(_CORE + "EventSeries", "Data about the Event series this event represents or nil if it's a singleton Event."),
         "source": _r(_CORE + "EventSource", "The component reporting this event. Should be a short machine understandable string."),
         "type": _s("Type of this event (Normal, Warning), new types could be added in the future")},
        ("", "v1", "Event"),
        ["metadata", "involvedObject"],
    ),
    "io.k8s.api.events.v1.EventSeries": _kind(
        "EventSeries contain information on series of events, i.e. thing that was/is happening continuously for some time.",
        {"count": _i("count is the number of occurrences in this series up to the last heartbeat time."),
         "lastObservedTime": _r(_MICRO, "lastObservedTime is the time when last Event from the series was seen before last heartbeat.")},
        None,
        ["count", "lastObservedTime"],
    ),
    "io.k8s.api.events.v1.Event": _kind(
        "Event is a report of an event somewhere in the cluster.",
        {"action": _s("action is what action was taken/failed regarding to the regarding object."),
         "deprecatedCount": _i("deprecatedCount is the deprecated field assuring backward compatibility with core.v1 Event type."),
         "deprecatedFirstTimestamp": _r(_TIME, "deprecatedFirstTimestamp is the deprecated field assuring backward compatibility with core.v1 Event type."),
         "deprecatedLastTimestamp": _r(_TIME, "deprecatedLastTimestamp is the deprecated field assuring backward compatibility with core.v1 Event type."),
         "deprecatedSource": _r(_CORE + "EventSource", "deprecatedSource is the deprecated field assuring backward compatibility with core.v1 Event type."),
         "eventTime": _r(_MICRO, "eventTime is the time when this Event was first observed. It is required."),
         "note": _s("note is a human-readable description of the status of this operation."),
         "reason": _s("reason is why the action was taken. It is human-readable."),
         "regarding": _r(_CORE + "ObjectReference", "regarding contains the object this Event is about."),
         "related": _r(_CORE + "ObjectReference", "related is the optional secondary object for more complex actions."),
         "reportingController": _s("reportingController is the name of the controller that emitted this Event, e.g. `kubernetes.io/kubelet`."),
         "reportingInstance": _s("reportingInstance is the ID of the controller instance, e.g. `kubelet-xyzf`."),
         "series": _r("io.k8s.api.events.v1.EventSeries", "series is data about the Event series this event represents or nil if it's a singleton Event."),
         "type": _s("type is the type of this event (Normal, Warning), new types could be added in the future.")},
        ("events.k8s.io", "v1", "Event"),
        ["eventTime"],
    ),
    "io.k8s.api.coordination.v1.LeaseSpec": _kind(
        "LeaseSpec is a specification of a Lease.",
        {"acquireTime": _r(_MICRO, "acquireTime is a time when the current lease was acquired."),
         "holderIdentity": _s("holderIdentity contains the identity of the holder of a current lease."),
         "leaseDurationSeconds": _i("leaseDurationSeconds is a duration that candidates for a lease need to wait to force acquire it."),
         "leaseTransitions": _i("leaseTransitions is the number of transitions of a lease between holders."),
         "preferredHolder": _s("PreferredHolder signals to a lease holder that the lease has a more optimal holder and should be given up."),
         "renewTime": _r(_MICRO, "renewTime is a time when the current holder of a lease has last updated the lease."),
         "strategy": _s("Strategy indicates the strategy for picking the leader for coordinated leader election.")},
        None,
    ),
    "io.k8s.api.coordination.v1.Lease": _kind(
        "Lease defines a lease concept.",
        {"spec": _r("io.k8s.api.coordination.v1.LeaseSpec", "spec contains the specification of the Lease.")},
        ("coordination.k8s.io", "v1", "Lease"),
    ),
}

_APIEXT = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1."
BUILTIN_DEFS.update({
    _APIEXT + "JSONSchemaProps": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                  "description": "JSONSchemaProps is a JSON-Schema following Specification Draft 4 (http://json-schema.org/)."},
    _APIEXT + "CustomResourceDefinitionNames": _kind(
        "CustomResourceDefinitionNames indicates the names to serve this CustomResourceDefinition",
        {"categories": _arr({"type": "string", "default": ""}, "categories is a list of grouped resources this custom resource belongs to (e.g. 'all').", **{"x-kubernetes-list-type": "atomic"}),
         "kind": _s("kind is the serialized kind of the resource. It is normally CamelCase and singular."),
         "listKind": _s("listKind is the serialized kind of the list for this resource. Defaults to \"`kind`List\"."),
         "plural": _s("plural is the plural name of the resource to serve."),
         "shortNames": _arr({"type": "string", "default": ""}, "shortNames are short names for the resource, exposed in API discovery documents.", **{"x-kubernetes-list-type": "atomic"}),
         "singular": _s("singular is the singular name of the resource. It must be all lowercase. Defaults to lowercased `kind`.")},
        None,
        ["plural", "kind"],
    ),
    _APIEXT + "CustomResourceColumnDefinition": _kind(
        "CustomResourceColumnDefinition specifies a column for server side printing.",
        {"description": _s("description is a human readable description of this column."),
         "format": _s("format is an optional OpenAPI type definition for this column."),
         "jsonPath": _s("jsonPath is a simple JSON path (i.e. with array notation) which is evaluated against each custom resource to produce the value for this column."),
         "name": _s("name is a human readable name for the column."),
         "priority": _i("priority is an integer defining the relative importance of this column compared to others."),
         "type": _s("type is an OpenAPI type definition for this column.")},
        None,
        ["name", "type", "jsonPath"],
    ),
    _APIEXT + "CustomResourceValidation": _kind(
        "CustomResourceValidation is a list of validation methods for CustomResources.",
        {"openAPIV3Schema": _r(_APIEXT + "JSONSchemaProps", "openAPIV3Schema is the OpenAPI v3 schema to use for validation and pruning.")},
        None,
    ),
    _APIEXT + "CustomResourceDefinitionVersion": _kind(
        "CustomResourceDefinitionVersion describes a version for CRD.",
        {"additionalPrinterColumns": _arr(_r(_APIEXT + "CustomResourceColumnDefinition", ""), "additionalPrinterColumns specifies additional columns returned in Table output.", **{"x-kubernetes-list-type": "atomic"}),
         "deprecated": _b("deprecated indicates this version of the custom resource API is deprecated."),
         "deprecationWarning": _s("deprecationWarning overrides the default warning returned to API clients."),
         "name": _s("name is the version name, e.g. “v1”, “v2beta1”, etc."),
         "schema": _r(_APIEXT + "CustomResourceValidation", "schema describes the schema used for validation, pruning, and defaulting of this version of the custom resource."),
         "served": _b("served is a flag enabling/disabling this version from being served via REST APIs"),
         "storage": _b("storage indicates this version should be used when persisting custom resources to storage."),
         "subresources": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "subresources specify what subresources this version of the defined custom resource have."}},
        None,
        ["name", "served", "storage"],
    ),
    _APIEXT + "CustomResourceDefinitionSpec": _kind(
        "CustomResourceDefinitionSpec describes how a user wants their resource to appear",
        {"conversion": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "conversion defines conversion settings for the CRD."},
         "group": _s("group is the API group of the defined custom resource."),
         "names": _r(_APIEXT + "CustomResourceDefinitionNames", "names specify the resource and kind names for the custom resource."),
         "preserveUnknownFields": _b("preserveUnknownFields indicates that object fields which are not specified in the OpenAPI schema should be preserved when persisting to storage."),
         "scope": _s("scope indicates whether the defined custom resource is cluster- or namespace-scoped. Allowed values are `Cluster` and `Namespaced`."),
         "versions": _arr(_r(_APIEXT + "CustomResourceDefinitionVersion", ""), "versions is the list of all API versions of the defined custom resource.", **{"x-kubernetes-list-type": "atomic"})},
        None,
        ["group", "names", "scope", "versions"],
    ),
    _APIEXT + "CustomResourceDefinitionStatus": _kind(
        "CustomResourceDefinitionStatus indicates the state of the CustomResourceDefinition",
        {"acceptedNames": _r(_APIEXT + "CustomResourceDefinitionNames", "acceptedNames are the names that are actually being used to serve discovery."),
         "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        "description": "conditions indicate state for particular aspects of a CustomResourceDefinition",
                        "x-kubernetes-list-map-keys": ["type"], "x-kubernetes-list-type": "map"},
         "storedVersions": _arr({"type": "string", "default": ""}, "storedVersions lists all versions of CustomResources that were ever persisted.", **{"x-kubernetes-list-type": "atomic"})},
        None,
    ),
    _APIEXT + "CustomResourceDefinition": _kind(
        "CustomResourceDefinition represents a resource that should be exposed on the API server.  Its name MUST be in the format <.spec.name>.<.spec.group>.",
        {"spec": _r(_APIEXT + "CustomResourceDefinitionSpec", "spec describes how the user wants the resources to appear"),
         "status": _r(_APIEXT + "CustomResourceDefinitionStatus", "status indicates the actual state of the CustomResourceDefinition")},
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        ["spec"],
    ),
})

# (group, version, kind, plural, namespaced, status subresource, definition name)
BUILTIN_RESOURCES: list[tuple[str, str, str, str, bool, bool, str]] = [
    ("", "v1", "Namespace", "namespaces", False, True, _CORE + "Namespace"),
    ("", "v1", "ConfigMap", "configmaps", True, False, _CORE + "ConfigMap"),
    ("", "v1", "Secret", "secrets", True, False, _CORE + "Secret"),
    ("", "v1", "ServiceAccount", "serviceaccounts", True, False, _CORE + "ServiceAccount"),
    ("", "v1", "Event", "events", True, False, _CORE + "Event"),
    ("events.k8s.io", "v1", "Event", "events", True, False, "io.k8s.api.events.v1.Event"),
    ("coordination.k8s.io", "v1", "Lease", "leases", True, False, "io.k8s.api.coordination.v1.Lease"),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False, True,
     _APIEXT + "CustomResourceDefinition"),
]


# --- schema rendering ---------------------------------------------------------------------------


def _ref(name: str, v3: bool) -> str:
    return f"#/components/schemas/{name}" if v3 else f"#/definitions/{name}"


def _render(node: Any, v3: bool) -> Any:
    """Turn the neutral form (``{"$ref": "<definition name>"}``) into v2 or v3 references."""
    if isinstance(node, list):
        return [_render(x, v3) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node and not node["$ref"].startswith("#"):
        target = _ref(node["$ref"], v3)
        rest = {k: _render(v, v3) for k, v in node.items() if k != "$ref"}
        if v3 and rest:
            return {"allOf": [{"$ref": target}], **rest}
        return {"$ref": target, **rest}
    return {k: _render(v, v3) for k, v in node.items()}


def _v2_compatible(node: Any) -> Any:
    """What apiextensions publishes in v2: no nullable/junctors; nullable or int-or-string untyped."""
    if isinstance(node, list):
        return [_v2_compatible(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _v2_compatible(v) for k, v in node.items() if k not in ("nullable", "allOf", "anyOf", "oneOf", "not")}
    if node.get("nullable") or node.get("x-kubernetes-int-or-string"):
        for k in ("type", "items", "properties", "additionalProperties"):
            out.pop(k, None)
    return out


def _crd_schema(res: _Resource, schema: JSON, v3: bool) -> JSON:
    """The CRD version schema as published: apiVersion/kind/metadata fixed, GVK attached."""
    s = copy.deepcopy(schema)
    if not v3:
        s = _v2_compatible(s)
    props = s.setdefault("properties", {})
    props["apiVersion"] = {"type": "string", "description": _API_VERSION_DESC}
    props["kind"] = {"type": "string", "description": _KIND_DESC}
    props["metadata"] = _render({"$ref": OBJECT_META, "description": _META_DESC}, v3)
    s["type"] = "object"
    s["x-kubernetes-group-version-kind"] = [res.gvk]
    return s


def _list_schema(res: _Resource, v3: bool) -> JSON:
    desc = f"{res.kind}List is a list of {res.kind}"
    return {
        "description": desc,
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DESC},
            "items": {
                "type": "array",
                "description": f"List of {res.plural.lower()}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md",
                "items": _render({"$ref": res.definition}, v3),
            },
            "kind": {"type": "string", "description": _KIND_DESC},
            "metadata": _render({"$ref": LIST_META, "description": "Standard list metadata."}, v3),
        },
        "x-kubernetes-group-version-kind": [{**res.gvk, "kind": res.kind + "List"}],
    }


# --- paths --------------------------------------------------------------------------------------

_QUERY = {
    "pretty": "If 'true', then the output is pretty printed.",
    "dryRun": "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed",
    "fieldManager": "fieldManager is a name associated with the actor or entity that is making these changes.",
    "fieldValidation": (
        "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) "
        "containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict"
    ),
    "force": "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people.",
    "labelSelector": "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
    "fieldSelector": "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
    "limit": "limit is a maximum number of responses to return for a list call.",
    "continue": "The continue option should be set when retrieving more results from the server.",
    "resourceVersion": "resourceVersion sets a constraint on what resource versions a request may be served from.",
    "resourceVersionMatch": "resourceVersionMatch determines how resourceVersion is applied to list calls.",
    "watch": "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications.",
    "allowWatchBookmarks": "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
    "sendInitialEvents": "`sendInitialEvents=true` may be set together with `watch=true`.",
    "timeoutSeconds": "Timeout for the list/watch call.",
    "gracePeriodSeconds": "The duration in seconds before the object should be deleted.",
    "propagationPolicy": "Whether and how garbage collection will be performed.",
}
_QUERY_TYPES = {"force": "boolean", "limit": "integer", "watch": "boolean", "allowWatchBookmarks": "boolean",
                "sendInitialEvents": "boolean", "timeoutSeconds": "integer", "gracePeriodSeconds": "integer"}  # fmt: skip
_LIST_Q = ["allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion",
           "resourceVersionMatch", "sendInitialEvents", "timeoutSeconds", "watch"]  # fmt: skip
_WRITE_Q = ["dryRun", "fieldManager", "fieldValidation"]
_CR_PATCH_TYPES = ["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"]
# kube-apiserver publishes strategic merge for builtin kinds only: custom resources answer it with
# 415, and kubectl picks strategic merge whenever the OpenAPI says a PATCH accepts it.
_PATCH_TYPES = [*_CR_PATCH_TYPES, "application/strategic-merge-patch+json"]


def _param(name: str, v3: bool, where: str = "query") -> JSON:
    typ = _QUERY_TYPES.get(name, "string")
    desc = _QUERY.get(name) or f"{name} of the resource"
    if where == "path":
        desc = {"name": "name of the resource", "namespace": "object name and auth scope, such as for teams and projects"}[name]
    p: JSON = {"name": name, "in": where, "description": desc}
    if where == "path":
        p["required"] = True
    if v3:
        p["schema"] = {"type": typ, "uniqueItems": True}
    else:
        p["type"] = typ
        p["uniqueItems"] = True
    return p


def _body(schema_ref: str, v3: bool, content_types: list[str]) -> tuple[str, Any]:
    if v3:
        return "requestBody", {"content": {ct: {"schema": {"$ref": _ref(schema_ref, True)}} for ct in content_types}, "required": True}
    return "parameters", {"name": "body", "in": "body", "required": True, "schema": {"$ref": _ref(schema_ref, False)}}


def _op(res: _Resource, verb: str, action: str, op_id: str, query: list[str], resp: str, v3: bool,
        body: tuple[str, list[str]] | None = None) -> JSON:  # fmt: skip
    tag = (res.group.split(".")[0] if res.group else "core") + "_" + res.version
    op: JSON = {
        "description": f"{verb} {res.kind}",
        "operationId": op_id,
        "tags": [tag],
        "parameters": [_param(q, v3) for q in query],
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": dict(res.gvk),
    }
    if body is not None:
        key, value = _body(body[0], v3, body[1])
        if key == "parameters":
            op["parameters"].insert(0, value)
        else:
            op[key] = value
    if v3:
        op["responses"] = {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": _ref(resp, True)}}}},
                           "401": {"description": "Unauthorized"}}  # fmt: skip
    else:
        op["consumes"] = body[1] if body else ["*/*"]
        op["produces"] = ["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"]
        op["schemes"] = ["https"]
        op["responses"] = {"200": {"description": "OK", "schema": {"$ref": _ref(resp, False)}}, "401": {"description": "Unauthorized"}}
    return op


def _op_name(res: _Resource, verb: str, namespaced: bool, suffix: str = "") -> str:
    group = "".join(p.capitalize() for p in (res.group or "core").replace("-", ".").split(".")[:2])
    scope = "Namespaced" if namespaced else ""
    return f"{verb}{group}{res.version.capitalize()}{scope}{res.kind}{suffix}"


def _paths(res: _Resource, v3: bool) -> JSON:
    ns = res.namespaced
    base = f"{res.prefix}/namespaces/{{namespace}}/{res.plural}" if ns else f"{res.prefix}/{res.plural}"
    scope_params = [_param("namespace", v3, "path")] if ns else []
    json_ct = ["application/json", "application/yaml"]
    coll: JSON = {
        "get": _op(res, "list or watch objects of kind", "list", _op_name(res, "list", ns), _LIST_Q, res.definition + "List", v3),
        "post": _op(res, "create a", "post", _op_name(res, "create", ns), _WRITE_Q, res.definition, v3, (res.definition, json_ct)),
        "delete": _op(res, "delete collection of", "deletecollection", _op_name(res, "deleteCollection", ns),
                      [*_LIST_Q, "dryRun", "gracePeriodSeconds", "propagationPolicy"], STATUS, v3),
        "parameters": [*scope_params, _param("pretty", v3)],
    }  # fmt: skip
    item_params = [_param("name", v3, "path"), *scope_params, _param("pretty", v3)]

    def item(suffix: str) -> JSON:
        what = "" if not suffix else "Status"
        d: JSON = {
            "get": _op(res, "read the specified", "get", _op_name(res, "read", ns, what), ["resourceVersion"], res.definition, v3),
            "put": _op(res, "replace the specified", "put", _op_name(res, "replace", ns, what), _WRITE_Q, res.definition, v3,
                       (res.definition, json_ct)),
            "patch": _op(res, "partially update the specified", "patch", _op_name(res, "patch", ns, what),
                         [*_WRITE_Q, "force"], res.definition, v3, (PATCH, _CR_PATCH_TYPES if res.custom else _PATCH_TYPES)),
            "parameters": item_params,
        }  # fmt: skip
        if not suffix:
            d["delete"] = _op(res, "delete a", "delete", _op_name(res, "delete", ns), ["dryRun", "gracePeriodSeconds", "propagationPolicy"], STATUS, v3)
        return d

    out = {base: coll, base + "/{name}": item("")}
    if res.status:
        out[base + "/{name}/status"] = item("/status")
    if ns:
        out[f"{res.prefix}/{res.plural}"] = {
            "get": _op(res, "list or watch objects of kind", "list", _op_name(res, "list", False, "ForAllNamespaces"), _LIST_Q,
                       res.definition + "List", v3),
            "parameters": [_param("pretty", v3)],
        }  # fmt: skip
    return out


# --- documents ----------------------------------------------------------------------------------


def _builtin_resources() -> list[_Resource]:
    return [_Resource(*r) for r in BUILTIN_RESOURCES]


def _collect_refs(node: Any, into: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#") and ref not in into:
            into.add(ref)
            _collect_refs(BUILTIN_DEFS.get(ref), into)
        for v in node.values():
            _collect_refs(v, into)
    elif isinstance(node, list):
        for v in node:
            _collect_refs(v, into)


def _definitions(resources: list[_Resource], crd_schemas: dict[str, tuple[_Resource, JSON]], v3: bool) -> JSON:
    names: set[str] = {OBJECT_META, LIST_META, PATCH, STATUS, DELETE_OPTIONS}
    for r in resources:
        if r.definition not in crd_schemas:
            names.add(r.definition)
    closure: set[str] = set()
    _collect_refs([{"$ref": n} for n in names], closure)
    defs: JSON = {}
    for n in sorted(closure):
        if n in BUILTIN_DEFS:
            defs[n] = _render(BUILTIN_DEFS[n], v3)
    for r in resources:
        if r.definition in crd_schemas:
            defs[r.definition] = _crd_schema(r, crd_schemas[r.definition][1], v3)
            defs[r.definition + "List"] = _list_schema(r, v3)
        elif r.definition + "List" not in defs:
            defs[r.definition + "List"] = _list_schema(r, v3)
    return dict(sorted(defs.items()))


def openapi_v2(crds: list[JSON]) -> JSON:
    """Swagger 2.0 document for ``/openapi/v2``: builtin kinds, every served version of every CRD.

    Definitions carry ``x-kubernetes-group-version-kind``; every resource has collection, item
    and (when enabled) ``/status`` paths whose PATCH/PUT/POST operations list the
    ``fieldValidation`` query parameter and an ``x-kubernetes-group-version-kind`` object.
    """
    crd_res = _crd_resources(crds)
    resources = _builtin_resources() + [r for r, _ in crd_res]
    crd_schemas = {r.definition: (r, s) for r, s in crd_res}
    paths: JSON = {}
    for r in resources:
        paths.update(_paths(r, False))
    return {
        "swagger": "2.0",
        "info": dict(INFO),
        "paths": dict(sorted(paths.items())),
        "definitions": _definitions(resources, crd_schemas, False),
        "securityDefinitions": {"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_v3_doc(group: str, version: str, crds: list[JSON]) -> JSON:
    """OpenAPI 3.0 document for ``/openapi/v3/api/v1`` or ``/openapi/v3/apis/<group>/<version>``.

    ``components.schemas`` holds the group/version's kinds (CRD schemas with descriptions, as
    ``kubectl explain`` shows them) and the meta definitions they reference (``allOf: [$ref]`` as
    kube writes them); ``paths`` as in :func:`openapi_v2`. Unknown group/version: no paths.
    """
    crd_res = [(r, s) for r, s in _crd_resources(crds) if r.group == group and r.version == version]
    resources = [r for r in _builtin_resources() if r.group == group and r.version == version] + [r for r, _ in crd_res]
    crd_schemas = {r.definition: (r, s) for r, s in crd_res}
    paths: JSON = {}
    for r in resources:
        paths.update(_paths(r, True))
    return {
        "openapi": "3.0.0",
        "info": dict(INFO),
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": _definitions(resources, crd_schemas, True),
            "securitySchemes": {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                                "name": "authorization", "in": "header"}},
        },
    }


def document_hash(doc: JSON) -> str:
    """Stable upper-case hex SHA-512 of a document (kube uses the doc's ETag the same way)."""
    return hashlib.sha512(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest().upper()


def openapi_v3_index(group_versions: list[str], crds: list[JSON] | None = None) -> JSON:
    """The ``/openapi/v3`` discovery index.

    ``group_versions`` entries are ``api/v1`` / ``apis/<group>/<version>`` (``v1`` and
    ``<group>/<version>`` are accepted too). Each maps to ``{"serverRelativeURL":
    "/openapi/v3/<gv>?hash=<HEX>"}`` where the hash digests the document
    :func:`openapi_v3_doc` returns for ``crds``: pass the CRDs so the hash changes when a schema
    does (kubectl caches documents by that URL).
    """
    paths: JSON = {}
    for gv in group_versions:
        parts = gv.strip("/").split("/")
        if parts[0] == "api":
            group, version = "", parts[1]
        elif parts[0] == "apis":
            group, version = parts[1], parts[2]
        elif len(parts) == 1:
            group, version = "", parts[0]
        else:
            group, version = parts[0], parts[1]
        key = _gv_path(group, version)
        digest = document_hash(openapi_v3_doc(group, version, crds or []))
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest}"}
    return {"paths": paths}
