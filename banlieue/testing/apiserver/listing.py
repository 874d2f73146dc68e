"""LIST: selectors, consistent pagination (limit/continue), resourceVersionMatch, Table output.

Source: Kubernetes API concepts, "Retrieving large results sets in chunks" (opaque continue
tokens, ``remainingItemCount``, 410 Expired for a compacted continue) and "Resource versions"
(``resourceVersionMatch`` semantics; ListOptions validation from apimachinery).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from . import builtin, errors
from .resources import ResourceType
from .selectors import parse_field_selector, parse_label_selector
from .store import Store
from .tables import to_table
from .target import Target
from .views import json_response, partial_metadata, present, wants_partial_metadata, wants_table

JSON = dict[str, Any]


def selector_matcher(rt: ResourceType, request: web.Request) -> Callable[[JSON], bool]:
    """labelSelector and fieldSelector of the query as one predicate; 400 BadRequest on bad syntax."""
    q = request.query
    try:
        ls = parse_label_selector(q.get("labelSelector", ""))
        fs = parse_field_selector(q.get("fieldSelector", ""), builtin.extra_field_selectors(rt))
    except ValueError as e:
        raise errors.bad_request(str(e)) from e

    def matches(obj: JSON) -> bool:
        return ls.matches(obj["metadata"].get("labels") or {}) and fs.matches(present(rt, obj))

    return matches



def _encode_continue(rv: int, last: tuple[str, str]) -> str:
    start = f"{last[0]}/{last[1]}\x00"
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        d = json.loads(raw)
        ns, _, name = str(d["start"]).rstrip("\x00").partition("/")
        return int(d["rv"]), (ns, name)
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise errors.bad_request(f"continue key is not valid: {e}") from e


EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show up "
    "in the list."
)


def validate_list_options(request: web.Request, *, watch: bool) -> None:
    """ListOptions rules of apimachinery (internalversion/validation.ValidateListOptions); 422 Invalid."""
    q = request.query
    causes: list[JSON] = []
    match = q.get("resourceVersionMatch")
    rv = q.get("resourceVersion")
    if match:
        if match not in ("NotOlderThan", "Exact"):
            causes.append({"reason": "FieldValueNotSupported", "field": "resourceVersionMatch",
                           "message": f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""'})
        elif watch and q.get("sendInitialEvents") is None:
            causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                           "message": "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"})
        elif not rv and match == "Exact":
            causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                           "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"})
        elif match == "Exact" and rv == "0":
            causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                           "message": 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'})
        elif q.get("continue"):
            causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                           "message": "Forbidden: resourceVersionMatch is forbidden when continue is provided"})
    if q.get("sendInitialEvents") is not None:
        if not watch:
            causes.append({"reason": "FieldValueForbidden", "field": "sendInitialEvents",
                           "message": "Forbidden: sendInitialEvents is forbidden for list"})
        elif q.get("sendInitialEvents", "").lower() in ("1", "true"):
            # Without allowWatchBookmarks kube-apiserver accepts it too (no end bookmark then:
            # tests/envtest/test_differential.py).
            if match != "NotOlderThan":
                causes.append({"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                               "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"})
    if rv and not rv.isdigit():
        causes.append({"reason": "FieldValueInvalid", "field": "resourceVersion",
                       "message": f'Invalid value: "{rv}": must be a non-negative integer'})
    if causes:
        raise errors.invalid("meta.k8s.io", "ListOptions", "", causes)


def list_objects(store: Store, t: Target, request: web.Request) -> web.Response:
    """LIST with selectors and limit/continue pagination.

    Pages of one list are a consistent snapshot at the first page's resourceVersion (rebuilt
    from the event history); ``resourceVersionMatch=Exact`` lists at the given revision. Both
    answer 410 Expired once the revision has been compacted away.
    """
    validate_list_options(request, watch=False)
    rt, q = t.rt, request.query
    matches = selector_matcher(rt, request)
    limit = 0
    if q.get("limit"):
        try:
            limit = max(0, int(q["limit"]))
        except ValueError as e:
            raise errors.bad_request(f"invalid limit: {q['limit']}") from e
    list_rv, after = store.rv, None
    if q.get("resourceVersion", "0").isdigit() and int(q.get("resourceVersion", "0")) > store.rv:
        raise errors.too_large_resource_version(int(q["resourceVersion"]), store.rv)
    if q.get("continue"):
        list_rv, after = _decode_continue(q["continue"])
    elif q.get("resourceVersionMatch") == "Exact":
        list_rv = int(q["resourceVersion"])
    source = store.items_at(rt.group_resource, list_rv, t.namespace if rt.namespaced else None)
    if source is None:
        if q.get("continue"):
            raise errors.expired(EXPIRED_CONTINUE)
        raise errors.expired(f"too old resource version: {list_rv} ({store.compacted_rv(rt.group_resource)})")
    items: list[JSON] = []
    token = None
    remaining = 0
    last: tuple[str, str] | None = None
    for key, obj in source:
        if after is not None and key <= after:
            continue
        if not matches(obj):
            continue
        if limit and len(items) >= limit:
            remaining += 1
            continue
        items.append(present(rt, obj))
        last = key
    if remaining and last is not None:
        token = _encode_continue(list_rv, last)
    if wants_table(request):
        table = to_table(items, rt.printer_columns, list_rv=str(list_rv), continue_token=token,
                         include_object=q.get("includeObject", "Metadata"))
        return json_response(table)
    md: JSON = {"resourceVersion": str(list_rv)}
    if token:
        md["continue"] = token
        if not q.get("labelSelector") and not q.get("fieldSelector"):
            md["remainingItemCount"] = remaining
    if wants_partial_metadata(request):
        return json_response({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": md,
                              "items": [partial_metadata(i) for i in items]})
    return json_response({"kind": rt.list_kind(), "apiVersion": rt.api_version, "metadata": md, "items": items})
