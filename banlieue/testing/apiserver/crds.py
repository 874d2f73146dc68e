"""CustomResourceDefinitions: validation, defaults, status (NamesAccepted/Established) and the
resource types a CRD makes served.

Source: apiextensions-apiserver ``pkg/apis/apiextensions/validation`` (name must be
``<plural>.<group>``, exactly one storage version, structural schemas), the naming and
establishing controllers (conditions ``NamesAccepted`` reason ``NoConflicts`` and ``Established``
reason ``InitialNamesAccepted``), and the ``customresourcecleanup.apiextensions.k8s.io`` finalizer
that deletes every custom resource before the CRD goes away.
"""

from __future__ import annotations

from typing import Any

from . import schema as schema_mod
from .resources import ResourceType

JSON = dict[str, Any]
CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"


def _cause(reason: str, field: str, message: str) -> JSON:
    return {"reason": reason, "field": field, "message": message}


def default_crd(crd: JSON) -> None:
    """Fill defaults in place: singular, listKind, served/storage flags, conversion strategy."""
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind") and not names.get("singular"):
        names["singular"] = str(names["kind"]).lower()
    if names.get("kind") and not names.get("listKind"):
        names["listKind"] = names["kind"] + "List"
    spec.setdefault("conversion", {"strategy": "None"})
    for v in spec.get("versions") or []:
        if isinstance(v, dict):
            v.setdefault("served", True)
            v.setdefault("storage", False)


def validate_crd(crd: JSON) -> list[JSON]:
    """StatusCauses for an invalid CRD (empty when valid)."""
    out: list[JSON] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec.get("group") or ""
    plural = names.get("plural") or ""
    name = (crd.get("metadata") or {}).get("name", "")
    if not group:
        out.append(_cause("FieldValueRequired", "spec.group", "Required value"))
    elif "." not in group:
        out.append(_cause("FieldValueInvalid", "spec.group", f'Invalid value: "{group}": should be a domain with at least one dot'))
    if not plural:
        out.append(_cause("FieldValueRequired", "spec.names.plural", "Required value"))
    if not names.get("kind"):
        out.append(_cause("FieldValueRequired", "spec.names.kind", "Required value"))
    if plural and group and name != f"{plural}.{group}":
        out.append(_cause("FieldValueInvalid", "metadata.name", f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        out.append(_cause("FieldValueNotSupported", "spec.scope",
                          f'Unsupported value: "{spec.get("scope") or ""}": supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        out.append(_cause("FieldValueRequired", "spec.versions", "Required value: must have exactly one version marked as storage version"))
    storage = [v for v in versions if isinstance(v, dict) and v.get("storage")]
    if versions and len(storage) != 1:
        out.append(_cause("FieldValueInvalid", "spec.versions",
                          "Invalid value: []apiextensions.CustomResourceDefinitionVersion{...}: must have exactly one version marked as storage version"))
    for i, v in enumerate(versions):
        if not isinstance(v, dict):
            continue
        if not v.get("name"):
            out.append(_cause("FieldValueRequired", f"spec.versions[{i}].name", "Required value"))
        schema = (v.get("schema") or {}).get("openAPIV3Schema")
        if schema is None:
            out.append(_cause("FieldValueRequired", f"spec.versions[{i}].schema.openAPIV3Schema", "Required value: schemas are required"))
        else:
            for e in schema_mod.structural_errors(schema):
                out.append(_cause("FieldValueInvalid", f"spec.versions[{i}].schema.openAPIV3Schema", e))
    return out


def validate_crd_update(crd: JSON, old: JSON | None) -> list[JSON]:
    """Causes for changing immutable CRD fields (spec.group, spec.scope, spec.names.plural)."""
    if old is None:
        return []
    out = []
    for path in (("group",), ("scope",), ("names", "plural")):
        new_v: Any = crd.get("spec")
        old_v: Any = old.get("spec")
        for p in path:
            new_v = new_v.get(p) if isinstance(new_v, dict) else None
            old_v = old_v.get(p) if isinstance(old_v, dict) else None
        if new_v != old_v:
            out.append(_cause("FieldValueInvalid", "spec." + ".".join(path),
                              f'Invalid value: "{new_v}": field is immutable'))
    return out


def set_status(crd: JSON, old: JSON | None, now: str) -> None:
    """Set ``status`` (acceptedNames, conditions, storedVersions) in place, keeping transition times."""
    spec = crd["spec"]
    names = spec.get("names") or {}
    old_status = (old or {}).get("status") or {}
    old_conds = {c.get("type"): c for c in old_status.get("conditions") or []}

    def cond(t: str, reason: str, message: str, status: str = "True") -> JSON:
        prev = old_conds.get(t)
        ltt = prev["lastTransitionTime"] if prev and prev.get("status") == status else now
        return {"type": t, "status": status, "lastTransitionTime": ltt, "reason": reason, "message": message}

    conditions = [
        cond("NamesAccepted", "NoConflicts", "no conflicts found"),
        cond("Established", "InitialNamesAccepted", "the initial names have been accepted"),
    ]
    if crd["metadata"].get("deletionTimestamp"):
        conditions.append(cond("Terminating", "InstanceDeletionInProgress", "CustomResource deletion is in progress"))
    stored = list(old_status.get("storedVersions") or [])
    for v in spec.get("versions") or []:
        if v.get("storage") and v.get("name") not in stored:
            stored.append(v["name"])
    accepted = {k: names[k] for k in ("plural", "singular", "kind", "listKind", "shortNames", "categories") if k in names}
    crd["status"] = {"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}


def resource_types(crd: JSON) -> list[ResourceType]:
    """One ResourceType per served version of ``crd``."""
    spec = crd["spec"]
    names = spec["names"]
    out = []
    for v in spec.get("versions") or []:
        if not v.get("served", True):
            continue
        subs = v.get("subresources") or {}
        out.append(ResourceType(
            group=spec["group"],
            version=v["name"],
            plural=names["plural"],
            singular=names.get("singular") or names["kind"].lower(),
            kind=names["kind"],
            namespaced=spec.get("scope") == "Namespaced",
            short_names=list(names.get("shortNames") or []),
            categories=list(names.get("categories") or []),
            status_subresource="status" in subs,
            scale_subresource=subs.get("scale"),
            schema=(v.get("schema") or {}).get("openAPIV3Schema"),
            printer_columns=v.get("additionalPrinterColumns"),
            builtin=False,
            has_generation=True,
            returns_deleted_object=False,
            unconditional_update=False,
            storage=bool(v.get("storage")),
            selectable_fields=[str(f.get("jsonPath", "")).lstrip(".") for f in v.get("selectableFields") or []
                               if isinstance(f, dict) and f.get("jsonPath")],
            crd_name=crd["metadata"]["name"],
        ))
    return out
