"""PATCH: decode by Content-Type, apply to the live object, then store through the update rules.

Source: k8s.io/apiserver ``pkg/endpoints/handlers/patch.go``: json-patch and merge-patch decode
errors are 400 BadRequest, application errors 422; strategic merge patch is refused with 415 on
custom resources; apply (``application/apply-patch+yaml``) requires ``fieldManager``,
creates the object when absent (422 for a missing ``fieldManager`` comes from the options check), and reports ownership conflicts as 409 with
``FieldManagerConflict`` causes.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml

from . import errors, ssa
from .errors import ApiError
from .patch import PatchError, json_merge_patch, json_patch
from .resources import ResourceType
from .rest import Rest, WriteOptions
from .strategic import strategic_merge
from .views import present

JSON = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
CR_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]
BUILTIN_PATCH_TYPES = [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH]


def _decode_json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"error decoding patch: {e}") from e


def apply_patch(
    rest: Rest,
    rt: ResourceType,
    ns: str,
    name: str,
    content_type: str,
    raw: bytes,
    opts: WriteOptions,
    *,
    subresource: str | None,
) -> tuple[JSON, bool]:
    """Apply a PATCH request; returns (stored object, created)."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    accepted = BUILTIN_PATCH_TYPES if rt.builtin else CR_PATCH_TYPES
    if ctype not in accepted:
        raise errors.unsupported_media_type(ctype, accepted)
    if ctype.startswith("application/apply-patch"):
        return _apply(rest, rt, ns, name, raw, opts, subresource=subresource)
    if opts.force:
        raise errors.invalid("meta.k8s.io", "PatchOptions", "", [{
            "reason": "FieldValueForbidden", "field": "force", "message": "Forbidden: may not be specified for non-apply patch"}])
    live = present(rt, rest.get_or_404(rt, ns, name))
    doc = _decode_json(raw)
    try:
        if ctype == JSON_PATCH:
            if not isinstance(doc, list):
                raise errors.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            patched = json_patch(live, doc)
        else:
            if not isinstance(doc, dict):
                raise errors.bad_request("json: cannot unmarshal into Go value of type map[string]interface {}")
            patched = strategic_merge(live, doc) if ctype == STRATEGIC_PATCH else json_merge_patch(live, doc)
    except PatchError as e:
        raise ApiError(422, "Invalid", e.message) from e
    if not isinstance(patched, dict):
        raise ApiError(422, "Invalid", "patch result is not an object")
    patched = copy.copy(patched)
    patched["metadata"] = dict(patched.get("metadata") or {})
    # The merged object keeps the live resourceVersion unless the patch changed it (precondition).
    return rest.update(rt, ns, name, patched, opts, subresource=subresource), False


_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def decode_apply_body(raw: bytes) -> Any:
    """The object of an ``application/apply-patch+yaml`` body. JSON is YAML, and clients
    (client-go, kubectl, banlieue) send JSON: a body that parses as JSON is taken as is (the
    same object YAML decoding yields, without pure-Python YAML's cost, which dominated apply
    under load); anything else is decoded as YAML (libyaml when present). Raises ApiError 400
    when neither decodes."""
    if raw.lstrip()[:1] == b"{":
        try:
            return json.loads(raw)
        except ValueError:
            pass  # YAML flow mappings also start with "{": let the YAML decoder judge
    try:
        return yaml.load(raw.decode() if raw else "", Loader=_YAML_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise errors.bad_request(f"error decoding YAML: {e}") from e


def _apply(
    rest: Rest, rt: ResourceType, ns: str, name: str, raw: bytes, opts: WriteOptions, *, subresource: str | None
) -> tuple[JSON, bool]:
    if not opts.field_manager:
        raise errors.invalid("meta.k8s.io", "PatchOptions", "", [{
            "reason": "FieldValueRequired", "field": "fieldManager", "message": "Required value: is required for apply patch"}])
    applied = decode_apply_body(raw)
    if not isinstance(applied, dict):
        raise errors.bad_request("error decoding YAML: the body is not an object")
    amd = applied.get("metadata")
    if not isinstance(amd, dict):
        raise errors.bad_request("Object 'metadata' is missing")
    if not applied.get("kind") or not applied.get("apiVersion"):
        raise errors.bad_request("Object 'Kind' is missing in the applied configuration")
    if amd.get("name") and amd["name"] != name:
        raise errors.bad_request(f"the name of the object ({amd['name']}) does not match the name on the URL ({name})")
    amd["name"] = name
    live = rest.store.get(rt.group_resource, ns if rt.namespaced else "", name)
    if live is not None:
        live = present(rt, live)
    if live is None and subresource == "status":
        raise errors.not_found(rt.group, rt.plural, name)
    try:
        merged = ssa.server_side_apply(
            live, applied, manager=opts.field_manager, force=opts.force, schema=rt.schema,
            subresource=subresource, now=rest.clock(),
        )
    except ssa.ApplyConflict as e:
        raise _conflict_error(e) from e
    if live is None:
        merged.setdefault("metadata", {})["name"] = name
        if rt.namespaced:
            merged["metadata"]["namespace"] = ns
        return rest.create(rt, ns, merged, opts, operation="Apply"), True
    merged = dict(merged)
    merged["metadata"] = dict(merged.get("metadata") or {})
    # The applied resourceVersion is a precondition (409 when it is not the live one), on the
    # status subresource too, where the merge keeps only the configuration's status.
    merged["metadata"]["resourceVersion"] = amd.get("resourceVersion") or live["metadata"]["resourceVersion"]
    return rest.update(rt, ns, name, merged, opts, subresource=subresource, operation="Apply"), False


def _conflict_error(e: ssa.ApplyConflict) -> ApiError:
    """kube's NewApplyConflict: 409 Conflict, the summary as message, details holding only causes."""
    return ApiError(409, "Conflict", e.message, details={"causes": e.causes})
