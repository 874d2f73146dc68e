"""HTTP handlers for resource paths: get, list, watch, create, update, patch, delete(collection).

URL shapes (API concepts, "Resource URIs"): ``/api/v1/<plural>[/<name>[/<sub>]]``,
``/api/v1/namespaces/<ns>/<plural>[/<name>[/<sub>]]`` and the same under
``/apis/<group>/<version>``; the legacy ``/watch/`` prefix is accepted. Responses are JSON only
(a protobuf Accept is answered with JSON, which clients accept).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import yaml
from aiohttp import web
from multidict import CIMultiDict

from . import builtin, errors, protobuf, scale
from .errors import ApiError
from .faults import Faults
from .listing import list_objects, selector_matcher, validate_list_options
from .patching import apply_patch
from .resources import ResourceType
from .rest import Rest, WriteOptions
from .store import Store
from .tables import to_table
from .target import Target
from .views import json_response, partial_metadata, present, wants_partial_metadata, wants_table
from .watch import DEFAULT_WATCH_TIMEOUT, WatchRequest, serve_watch

JSON = dict[str, Any]


class Backing(Protocol):
    """What the handlers read and write through: the server's store and REST layer, its fault
    injection and watch bookmark interval (``ApiServer`` has them; the handlers need no more,
    and do not import the server)."""

    store: Store
    rest: Rest
    faults: Faults
    bookmark_interval: float


def _bool(v: str | None) -> bool:
    return (v or "").lower() in ("1", "true")


def warning_headers(warnings: list[str]) -> CIMultiDict[str]:
    """``Warning: 299 - "<text>"`` headers (RFC 7234 warn-code 299, as kube-apiserver sends)."""
    h: CIMultiDict[str] = CIMultiDict()
    for w in warnings:
        h.add("Warning", '299 - "' + w.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return h


def _pairs_hook(duplicates: list[str]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> JSON:
        out: JSON = {}
        for k, v in pairs:
            if k in out:
                duplicates.append(k)
            out[k] = v
        return out

    return hook


async def read_body(request: web.Request, duplicates: list[str] | None = None) -> JSON:
    """Decode a JSON (or YAML) request body into an object; 400 / 415 otherwise.

    Duplicate JSON keys are appended to ``duplicates`` (fieldValidation reports them).
    """
    ctype = request.headers.get("Content-Type", "application/json").split(";", 1)[0].strip().lower()
    raw = await request.read()
    if ctype in ("application/json", "", "*/*"):
        try:
            body = json.loads(raw or b"{}", object_pairs_hook=_pairs_hook(duplicates if duplicates is not None else []))
        except (ValueError, UnicodeDecodeError) as e:
            raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") from e
    elif ctype == "application/vnd.kubernetes.protobuf":
        try:
            body = protobuf.decode(raw)
        except protobuf.ProtobufError as e:
            raise errors.unsupported_media_type(ctype, ["application/json", "application/yaml"]) from e
    elif ctype in ("application/yaml", "application/x-yaml", "text/yaml"):
        try:
            body = yaml.safe_load(raw or b"{}")
        except yaml.YAMLError as e:
            raise errors.bad_request(f"error converting YAML to JSON: {e}") from e
    else:
        raise errors.unsupported_media_type(ctype, ["application/json", "application/yaml"])
    if not isinstance(body, dict):
        raise errors.bad_request("couldn't get version/kind; json parse error: the body is not an object")
    return body


OPTIONS_KIND = {"POST": "CreateOptions", "PUT": "UpdateOptions", "PATCH": "PatchOptions", "DELETE": "DeleteOptions"}


def write_options(request: web.Request) -> WriteOptions:
    """dryRun, fieldManager, fieldValidation, force from the query.

    Invalid values are 422 Invalid on ``<Verb>Options.meta.k8s.io`` as apimachinery's
    ValidateCreateOptions/ValidatePatchOptions/... report them (``force`` only for apply patches,
    ``fieldManager`` required for apply patches, at most 128 printable characters).
    """
    q = request.query
    causes: list[JSON] = []
    dry = q.getall("dryRun", [])
    for d in dry:
        if d != "All":
            causes.append({"reason": "FieldValueNotSupported", "field": "dryRun",
                           "message": f'Unsupported value: "{d}": supported values: "All"'})
    fv = q.get("fieldValidation", "Warn") or "Warn"
    if fv not in ("Strict", "Warn", "Ignore"):
        causes.append({"reason": "FieldValueNotSupported", "field": "fieldValidation",
                       "message": f'Unsupported value: "{fv}": supported values: "Ignore", "Strict", "Warn"'})
    fm = q.get("fieldManager")
    if fm is not None and len(fm) > 128:
        causes.append({"reason": "FieldValueTooLong", "field": "fieldManager",
                       "message": "Too long: may not be more than 128 bytes"})
    elif fm is not None and not fm.isprintable():
        causes.append({"reason": "FieldValueInvalid", "field": "fieldManager",
                       "message": f"Invalid value: {json.dumps(fm)}: must only contain printable characters"})
    force = q.get("force")
    if request.method == "PATCH":
        is_apply = request.headers.get("Content-Type", "").startswith("application/apply-patch")
        if is_apply and not fm:
            causes.append({"reason": "FieldValueRequired", "field": "fieldManager",
                           "message": "Required value: is required for apply patch"})
        if not is_apply and force is not None:
            causes.append({"reason": "FieldValueForbidden", "field": "force",
                           "message": "Forbidden: may not be specified for non-apply patch"})
    if causes:
        raise errors.invalid("meta.k8s.io", OPTIONS_KIND.get(request.method, "CreateOptions"), "", causes)
    return WriteOptions(dry_run=bool(dry), field_manager=fm, field_validation=fv, force=_bool(force),
                        user_agent=request.headers.get("User-Agent", ""))


async def watch_objects(server: Backing, t: Target, request: web.Request) -> web.StreamResponse:
    """WATCH (``?watch=1`` or the ``/watch/`` prefix)."""
    rt, q = t.rt, request.query
    base = selector_matcher(rt, request)
    matches = base
    if t.name is not None:
        name = t.name

        def matches(obj: JSON) -> bool:
            return bool(obj["metadata"].get("name") == name and base(obj))

    try:
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else DEFAULT_WATCH_TIMEOUT
    except ValueError as e:
        raise errors.bad_request(f"invalid timeoutSeconds: {q['timeoutSeconds']}") from e
    validate_list_options(request, watch=True)
    sie = q.get("sendInitialEvents")
    transform = None
    if wants_table(request):
        inc = q.get("includeObject", "Metadata")

        def transform(obj: JSON) -> JSON:
            return to_table([present(rt, obj)], rt.printer_columns, list_rv=obj["metadata"].get("resourceVersion", ""),
                            continue_token=None, include_object=inc)
    elif wants_partial_metadata(request):
        def transform(obj: JSON) -> JSON:
            return partial_metadata(obj)
    else:
        def transform(obj: JSON) -> JSON:
            return present(rt, obj)
    send_initial_events = None if sie is None else _bool(sie)
    if sie is None and not q.get("resourceVersionMatch") and q.get("resourceVersion", "") in ("", "0"):
        # kube-apiserver with the WatchList feature (on since 1.32) defaults a watch from ""/"0"
        # to sendInitialEvents=true (metainternalversion.SetListOptionsDefaults, after the
        # validation of the query): with allowWatchBookmarks it ends the initial events with
        # the k8s.io/initial-events-end bookmark too (measured: tests/envtest/test_differential.py).
        send_initial_events = True
    req = WatchRequest(
        rt=rt,
        namespace=t.namespace if rt.namespaced else None,
        matches=matches,
        resource_version=q.get("resourceVersion"),
        allow_bookmarks=_bool(q.get("allowWatchBookmarks")),
        send_initial_events=send_initial_events,
        timeout=timeout,
        transform=transform,
    )
    return await serve_watch(request, req, server.store, server.faults, server.bookmark_interval, {})


ACCEPTABLE = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def negotiate(rt: ResourceType, accept: str) -> str:
    """``json`` or ``yaml`` for the Accept header; 406 NotAcceptable when neither is allowed.

    Protobuf is answered with JSON for builtin kinds (clients that ask for it also accept JSON);
    custom resources have no protobuf form, as in kube-apiserver.
    """
    if not accept.strip():
        return "json"
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", "*"):
            return "json"
        if media == "application/yaml":
            return "yaml"
        if media == "application/vnd.kubernetes.protobuf" and rt.builtin:
            return "json"
    raise ApiError(406, "NotAcceptable", f"only the following media types are accepted: {ACCEPTABLE}")


async def handle_resource(server: Backing, t: Target, request: web.Request) -> web.StreamResponse:
    """Dispatch a resource request by method; answers YAML when the client prefers it."""
    form = negotiate(t.rt, request.headers.get("Accept", ""))
    resp = await _handle_resource(server, t, request)
    if form == "yaml" and isinstance(resp, web.Response) and resp.content_type == "application/json" and resp.body:
        assert isinstance(resp.body, bytes)
        text = yaml.safe_dump(json.loads(resp.body), sort_keys=False)
        return web.Response(text=text, status=resp.status, content_type="application/yaml", headers={
            k: v for k, v in resp.headers.items() if k.lower() == "warning"})
    return resp


async def _handle_scale(server: Backing, t: Target, request: web.Request) -> web.Response:
    """GET/PUT/PATCH of ``/scale`` (autoscaling/v1 Scale)."""
    rt, ns, name = t.rt, t.namespace or "", t.name or ""
    if request.method == "GET":
        return json_response(scale.to_scale(rt, server.rest.get_or_404(rt, ns, name)))
    opts = write_options(request)
    if request.method == "PUT":
        return json_response(scale.write_scale(server.rest, rt, ns, name, await read_body(request), opts))
    if request.method == "PATCH":
        return json_response(scale.patch_scale(server.rest, rt, ns, name, request.headers.get("Content-Type", ""),
                                               await request.read(), opts))
    raise errors.method_not_allowed(rt.group, rt.plural, request.method)


async def _handle_resource(server: Backing, t: Target, request: web.Request) -> web.StreamResponse:
    rt, method, q = t.rt, request.method, request.query
    verb = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        raise errors.method_not_allowed(rt.group, rt.plural, method)
    ns = t.namespace or ""
    if t.subresource == "scale" and t.name is not None:
        return await _handle_scale(server, t, request)
    if method == "GET":
        if t.watch_path or _bool(q.get("watch")):
            return await watch_objects(server, t, request)
        if t.name is None:
            return list_objects(server.store, t, request)
        rv_q = q.get("resourceVersion", "")
        if rv_q.isdigit() and int(rv_q) > server.store.rv:
            raise errors.too_large_resource_version(int(rv_q), server.store.rv)
        obj = present(rt, server.rest.get_or_404(rt, ns, t.name))
        if wants_table(request):
            return json_response(to_table([obj], rt.printer_columns, list_rv=obj["metadata"]["resourceVersion"],
                                          continue_token=None, include_object=q.get("includeObject", "Metadata")))
        if wants_partial_metadata(request):
            return json_response(partial_metadata(obj))
        return json_response(obj)
    opts = write_options(request)
    if method in ("POST", "PUT"):
        # Decode errors of whole-object bodies carry kube's transformDecodeError prefix.
        opts.decode_prefix = f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
    if method == "POST" and rt.group == "authorization.k8s.io" and rt.plural in builtin.REVIEW_KINDS:
        body = await read_body(request)
        body["kind"], body["apiVersion"] = rt.kind, rt.api_version
        return json_response(builtin.review(body), 201)
    if method == "POST":
        if t.name is not None:
            raise errors.method_not_allowed(rt.group, rt.plural, method)
        body = await read_body(request, opts.duplicate_fields)
        obj = server.rest.create(rt, ns, body, opts)
        return json_response(present(rt, obj), 201, warning_headers(opts.warnings))
    if method == "PUT":
        if t.name is None:
            raise errors.method_not_allowed(rt.group, rt.plural, method)
        body = await read_body(request, opts.duplicate_fields)
        sub = t.subresource if t.subresource in ("status", "finalize") else None
        obj = server.rest.update(rt, ns, t.name, body, opts, subresource=sub)
        return json_response(present(rt, obj), 200, warning_headers(opts.warnings))
    if method == "PATCH":
        if t.name is None:
            raise errors.method_not_allowed(rt.group, rt.plural, method)
        raw = await request.read()
        sub = "status" if t.subresource == "status" else None
        obj, created = apply_patch(server.rest, rt, ns, t.name, request.headers.get("Content-Type", ""), raw, opts,
                                   subresource=sub)
        return json_response(present(rt, obj), 201 if created else 200, warning_headers(opts.warnings))
    # DELETE
    options: JSON = {}
    if request.can_read_body:
        options = await read_body(request)
    if q.get("propagationPolicy"):
        options["propagationPolicy"] = q["propagationPolicy"]
    if options.get("dryRun"):
        opts.dry_run = True
    if t.name is None:
        return delete_collection(server, t, request, options, opts)
    out, _deleted_now = server.rest.delete(rt, ns, t.name, options, opts)
    return json_response(present(rt, out) if out.get("kind") != "Status" else out, 200)


def delete_collection(server: Backing, t: Target, request: web.Request, options: JSON,
                      opts: WriteOptions) -> web.Response:
    """DELETE on a collection: delete every matching object; returns the list of them."""
    rt = t.rt
    matches = selector_matcher(rt, request)
    victims = [o for _, o in server.store.items(rt.group_resource, t.namespace if rt.namespaced else None) if matches(o)]
    items = []
    for obj in victims:
        md = obj["metadata"]
        try:
            out, _ = server.rest.delete(rt, md.get("namespace", ""), md["name"], dict(options), opts)
        except ApiError as e:
            if e.code == 404:
                continue
            raise
        items.append(out if out.get("kind") != "Status" else obj)
    return json_response({"kind": rt.list_kind(), "apiVersion": rt.api_version,
                          "metadata": {"resourceVersion": str(server.store.rv)}, "items": items})
