"""Server-side apply and managedFields, after sigs.k8s.io/structured-merge-diff (SMD) v4.

Field sets are Python sets of paths; a path is a tuple of FieldsV1 path elements: ``f:<field>``,
``k:<json of the list-map keys>``, ``v:<json value>`` (set items). A path in the set is a
*member* (owned); ``metadata.managedFields[].fieldsV1`` is the trie of those paths where ``.``
marks an interior node that is itself a member.

Implemented from SMD: ``TypedValue.ToFieldSet`` (which paths an applied config owns),
``Compare`` (added / removed / modified), ``merge`` (list-map order included), ``Updater.Apply``
(merge, ``prune`` with ``EnsureNamedFieldsAreMembers``, ``addBackOwnedItems``,
``addBackDanglingItems``), ``Updater.update`` (conflicts, forced ownership moves) and
``Updater.Update``; from kube-apiserver's fieldmanager: ``stripMeta`` (apiVersion, kind, metadata
name/namespace/uid/... never owned), reset fields (``status`` on the main resource, ``spec`` on
``/status``), the manager identity (manager, operation, apiVersion for Update, subresource),
``decodeLiveOrNew`` (``managedFields: []`` resets) and the entry order. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from banlieue.testing.apiserver.patch import json_equal

__all__ = ["ApplyConflict", "decode_fields", "encode_fields", "server_side_apply", "update_managed_fields"]

JSON = dict[str, Any]
Path = tuple[str, ...]
FieldSet = set[Path]


class ApplyConflict(Exception):
    """Apply would change fields owned by other managers (kube: 409 Conflict).

    ``conflicts`` is ``[(manager name, path)]`` with SMD path strings (``.spec.replicas``,
    ``.spec.disks[name="a"].sizeGiB``); ``causes`` are the StatusCauses kube returns
    (``FieldManagerConflict``, ``conflict with "mgr" using v1``) and ``message`` its summary.
    """

    def __init__(self, conflicts: list[tuple[str, str]], causes: list[JSON] | None = None, message: str = "") -> None:
        self.conflicts = conflicts
        self.causes = causes or [
            {"reason": "FieldManagerConflict", "message": f'conflict with "{m}"', "field": p} for m, p in conflicts
        ]
        self.message = message or f"Apply failed with {len(conflicts)} conflicts"
        super().__init__(self.message)


# --- types: just what SMD needs (struct vs map, list types) ------------------------------------


@dataclass(eq=False)
class _T:
    kind: str  # "struct" (objects and maps), "list" (granular), "scalar", "atomic"
    fields: dict[str, _T] = field(default_factory=dict)
    elem: _T | None = None  # struct: type of keys not in fields (None: untracked); list: items
    all_named: bool = False  # every key counts as a named field (typed builtins)
    list_type: str = "atomic"
    keys: tuple[str, ...] = ()


SCALAR = _T("scalar")
ATOMIC = _T("atomic")
DEDUCED = _T("struct")  # SMD deduced: granular maps, atomic lists, keys are not named fields
DEDUCED.elem = DEDUCED
NAMED = _T("struct", all_named=True)  # builtins without a schema: objects behave as structs
NAMED.elem = NAMED
_STR_MAP = _T("struct", elem=SCALAR)
OBJECT_META = _T(
    "struct",
    fields={
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
        "finalizers": _T("list", list_type="set", elem=SCALAR),
        "ownerReferences": _T("list", list_type="map", keys=("uid",), elem=NAMED),
        "managedFields": ATOMIC,
    },
    elem=NAMED,
    all_named=True,
)
_CONDITIONS = _T("list", list_type="map", keys=("type",), elem=NAMED)
BUILTIN_ROOT = _T(
    "struct",
    fields={"metadata": OBJECT_META, "status": _T("struct", fields={"conditions": _CONDITIONS}, elem=NAMED, all_named=True)},
    elem=NAMED,
    all_named=True,
)


def _from_schema(s: JSON) -> _T:
    if s.get("x-kubernetes-int-or-string"):
        return SCALAR
    t = s.get("type")
    preserve = bool(s.get("x-kubernetes-preserve-unknown-fields"))
    if t == "object":
        if s.get("x-kubernetes-map-type") == "atomic":
            return ATOMIC
        fields = {k: _from_schema(v) for k, v in (s.get("properties") or {}).items()}
        if s.get("x-kubernetes-embedded-resource"):
            fields.update({"apiVersion": SCALAR, "kind": SCALAR, "metadata": OBJECT_META})
        ap = s.get("additionalProperties")
        if isinstance(ap, dict) and not fields:
            return _T("struct", elem=_from_schema(ap))
        return _T("struct", fields=fields, elem=DEDUCED if (preserve or ap is True) else None)
    if t == "array":
        lt = s.get("x-kubernetes-list-type") or "atomic"
        if lt == "atomic":
            return ATOMIC
        items = s.get("items")
        return _T("list", list_type=lt, keys=tuple(s.get("x-kubernetes-list-map-keys") or ()),
                  elem=_from_schema(items) if isinstance(items, dict) else DEDUCED)  # fmt: skip
    if not t and preserve:
        return DEDUCED
    return SCALAR


_TYPE_CACHE: dict[int, tuple[JSON, _T]] = {}


def _root_type(schema: JSON | None) -> _T:
    """SMD type for a CRD version's ``openAPIV3Schema`` (None: builtin, typed like kube's)."""
    if schema is None:
        return BUILTIN_ROOT
    hit = _TYPE_CACHE.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    root = _from_schema(schema)
    if root.kind != "struct":
        root = _T("struct", elem=DEDUCED)
    root.fields.update({"apiVersion": SCALAR, "kind": SCALAR, "metadata": OBJECT_META})
    if len(_TYPE_CACHE) > 256:
        _TYPE_CACHE.clear()
    _TYPE_CACHE[id(schema)] = (schema, root)
    return root


# --- walking values ----------------------------------------------------------------------------


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _item_pe(item: Any, t: _T) -> str:
    if t.list_type == "set":
        return "v:" + _dumps(item)
    keys = {k: item[k] for k in t.keys if isinstance(item, dict) and k in item}
    return "k:" + _dumps(keys)


def _is_leaf(v: Any, t: _T) -> bool:
    if t.kind == "struct":
        return not isinstance(v, dict)
    if t.kind == "list":
        return not isinstance(v, list)
    return True


def _children(v: Any, t: _T) -> Iterator[tuple[str, Any, _T, bool]]:
    """(path element, value, type, is a named field) for each tracked child of a non-leaf."""
    if isinstance(v, dict):
        for k, x in v.items():
            ct = t.fields.get(k)
            named = ct is not None or t.all_named
            if ct is None:
                ct = t.elem
            if ct is not None:
                yield "f:" + k, x, ct, named
    else:
        ct = t.elem or DEDUCED
        for x in v:
            yield _item_pe(x, t), x, ct, False


def _to_field_set(v: Any, t: _T, path: Path, out: FieldSet) -> None:
    """SMD ``ToFieldSet``: scalars, atomics, list items, null/empty maps and map keys are members."""
    if _is_leaf(v, t):
        out.add(path)
        return
    for pe, x, ct, named in _children(v, t):
        cp = (*path, pe)
        _to_field_set(x, ct, cp, out)
        if pe[0] != "f" or x is None or x == {} or not named:
            out.add(cp)


def field_set(obj: JSON, t: _T) -> FieldSet:
    """The members an object (or applied configuration) sets."""
    out: FieldSet = set()
    _to_field_set(obj, t, (), out)
    return out


_INTERIOR = object()


def _all_paths(v: Any, t: _T, path: Path, out: dict[Path, Any]) -> None:
    if _is_leaf(v, t):
        out[path] = v
        return
    if path:
        out[path] = _INTERIOR
    for pe, x, ct, _ in _children(v, t):
        _all_paths(x, ct, (*path, pe), out)


@dataclass
class _Comparison:
    added: FieldSet
    removed: FieldSet
    modified: FieldSet


def _compare(old: JSON, new: JSON, t: _T, ignore: Iterable[Path]) -> _Comparison:
    """SMD ``Compare``: every added/removed node (interior ones included) and changed leaves."""
    po: dict[Path, Any] = {}
    pn: dict[Path, Any] = {}
    _all_paths(old, t, (), po)
    _all_paths(new, t, (), pn)
    added = set(pn) - set(po)
    removed = set(po) - set(pn)
    modified = set()
    for p in set(po) & set(pn):
        a, b = po[p], pn[p]
        if a is _INTERIOR and b is _INTERIOR:
            continue
        if a is _INTERIOR or b is _INTERIOR or not json_equal(a, b):
            modified.add(p)
    ig = tuple(ignore)
    return _Comparison(_drop_prefixed(added, ig), _drop_prefixed(removed, ig), _drop_prefixed(modified, ig))


def _drop_prefixed(s: FieldSet, prefixes: tuple[Path, ...]) -> FieldSet:
    if not prefixes:
        return s
    return {p for p in s if not any(p[: len(x)] == x for x in prefixes)}


def _type_at(root: _T, path: Path) -> tuple[_T, bool]:
    """Type of the node at ``path`` and whether its last element is a named struct field."""
    t, named = root, False
    for pe in path:
        if pe.startswith("f:") and t.kind == "struct":
            ct = t.fields.get(pe[2:])
            named = ct is not None or t.all_named
            t = ct or t.elem or DEDUCED
        else:
            named = False
            t = t.elem or DEDUCED
    return t, named


def _ensure_named(s: FieldSet, root: _T) -> FieldSet:
    """SMD ``EnsureNamedFieldsAreMembers``: struct fields on the way to a member become members."""
    out = set(s)
    cache: dict[Path, bool] = {}
    for p in s:
        for i in range(1, len(p)):
            prefix = p[:i]
            named = cache.get(prefix)
            if named is None:
                named = cache[prefix] = prefix[-1].startswith("f:") and _type_at(root, prefix)[1]
            if named:
                out.add(prefix)
    return out


def _trie(s: FieldSet) -> JSON:
    root: JSON = {}
    for p in s:
        node = root
        for pe in p:
            node = node.setdefault(pe, {})
        node["."] = {}
    return root


def _remove_items(v: Any, t: _T, remove: FieldSet) -> Any:
    """SMD ``RemoveItems``: drop every member of ``remove`` (with its subtree); returns a copy."""
    return _remove_walk(v, t, _trie(remove))


def _remove_walk(v: Any, t: _T, trie: JSON) -> Any:
    if _is_leaf(v, t):
        return v
    if isinstance(v, dict):
        out: JSON = {}
        for k, x in v.items():
            sub = trie.get("f:" + k)
            if sub is None:
                out[k] = x
            elif "." not in sub:
                ct = t.fields.get(k) or t.elem or DEDUCED
                out[k] = _remove_walk(x, ct, sub)
        return out
    items = []
    ct = t.elem or DEDUCED
    for x in v:
        sub = trie.get(_item_pe(x, t))
        if sub is None:
            items.append(x)
        elif "." not in sub:
            items.append(_remove_walk(x, ct, sub))
    return items


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v


def _merge(live: Any, cfg: Any, t: _T) -> Any:
    """SMD merge of an applied configuration into the live value."""
    if cfg is None or live is None or _is_leaf(cfg, t) or _is_leaf(live, t):
        return _copy(cfg)
    if isinstance(cfg, dict):
        out = dict(live)
        for k, x in cfg.items():
            ct = t.fields.get(k) or t.elem or DEDUCED
            out[k] = _merge(live[k], x, ct) if k in live else _copy(x)
        return out
    return _merge_list(live, cfg, t)


def _merge_list(live: list[Any], cfg: list[Any], t: _T) -> list[Any]:
    # Order as SMD mergingWalker.visitListItems: live-only items keep their place, shared and
    # new items follow the applied order.
    ct = t.elem or DEDUCED
    lpes = [_item_pe(x, t) for x in live]
    rpes = [_item_pe(x, t) for x in cfg]
    lmap: JSON = {}
    for pe, x in zip(lpes, live, strict=True):
        lmap.setdefault(pe, x)
    rmap: JSON = {}
    for pe, x in zip(rpes, cfg, strict=True):
        rmap.setdefault(pe, x)
    shared = [pe for pe in rpes if pe in lmap]
    si = 0
    done: set[str] = set()
    out: list[Any] = []
    li = ri = 0
    while li < len(lpes) or ri < len(rpes):
        if li < len(lpes) and ri < len(rpes):
            pe = lpes[li]
            if pe == rpes[ri]:
                done.add(pe)
                out.append(_merge(lmap[pe], rmap[pe], ct))
                li, ri = li + 1, ri + 1
                if si < len(shared) and shared[si] == pe:
                    si += 1
                continue
            if pe in rmap and si < len(shared) and shared[si] != pe:
                li += 1
                continue
        if li < len(lpes):
            pe = lpes[li]
            if pe not in rmap:
                out.append(live[li])
                li += 1
                continue
            if pe in done:
                li += 1
                continue
        if ri < len(rpes):
            pe = rpes[ri]
            if pe not in done:
                done.add(pe)
                out.append(_merge(lmap[pe], rmap[pe], ct) if pe in lmap else _copy(rmap[pe]))
            ri += 1
            if si < len(shared) and shared[si] == pe:
                si += 1
    return out


# --- FieldsV1 encoding --------------------------------------------------------------------------

_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


def encode_fields(s: FieldSet) -> JSON:
    """FieldsV1 trie of a field set (``.`` first, then f:, k:, v: elements, each sorted)."""
    return _encode(_trie(s))


def _encode(node: JSON) -> JSON:
    out: JSON = {}
    keys = [k for k in node if k != "."]
    if "." in node and keys:
        out["."] = {}
    for k in sorted(keys, key=lambda k: (_RANK.get(k[0], 9), k)):
        out[k] = _encode(node[k])
    return out


def decode_fields(fields_v1: JSON) -> FieldSet:
    """Field set of a FieldsV1 trie (an empty object marks a leaf member)."""
    out: FieldSet = set()

    def walk(node: JSON, path: Path) -> None:
        for k, sub in node.items():
            if k == ".":
                out.add(path)
            elif isinstance(sub, dict) and sub:
                walk(sub, (*path, k))
            else:
                out.add((*path, k))

    walk(fields_v1 or {}, ())
    return out


def path_string(p: Path) -> str:
    """SMD ``Path.String``: ``.spec.disks[name="a"].sizeGiB``, ``.metadata.finalizers[="x"]``."""
    parts = []
    for pe in p:
        kind, rest = pe[:2], pe[2:]
        if kind == "f:":
            parts.append("." + rest)
        elif kind == "k:":
            keys = json.loads(rest)
            parts.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(keys.items())) + "]")
        elif kind == "v:":
            parts.append(f"[={rest}]")
        else:
            parts.append(f"[{rest}]")
    return "".join(parts)


# --- managers ------------------------------------------------------------------------------------

# kube fieldmanager stripMeta: never owned by anyone.
_STRIP: FieldSet = {("f:apiVersion",), ("f:kind",), ("f:metadata",)} | {
    ("f:metadata", "f:" + k)
    for k in ("name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName", "generation",
              "managedFields", "resourceVersion")
}  # fmt: skip


def _reset_prefixes(subresource: str | None, status_subresource: bool) -> tuple[Path, ...]:
    """Reset fields (strategy ``GetResetFields``): ignored for ownership and comparison."""
    if subresource == "status":
        return (("f:spec",),)
    return (("f:status",),) if status_subresource else ()


def _filter(s: FieldSet, prefixes: tuple[Path, ...]) -> FieldSet:
    return _drop_prefixed(s - _STRIP, prefixes)


@dataclass
class _Manager:
    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    fields: FieldSet

    @property
    def key(self) -> tuple[str, str, str, str]:
        # BuildManagerIdentifier: appliers are keyed without apiVersion.
        return (self.manager, self.operation, "" if self.operation == "Apply" else self.api_version, self.subresource)

    def printed(self) -> str:
        """``printManager`` from kube's conflict errors."""
        s = json.dumps(self.manager)
        if self.subresource:
            s += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            s += f" using {self.api_version}" + (f" at {self.time}" if self.time else "")
        return s


def _decode_managers(entries: Any) -> dict[tuple[str, str, str, str], _Manager]:
    out: dict[tuple[str, str, str, str], _Manager] = {}
    for e in entries or []:
        if not isinstance(e, dict) or (not e.get("manager") and not e.get("operation")):
            continue
        m = _Manager(e.get("manager", ""), e.get("operation", "Update"), e.get("apiVersion", ""),
                     e.get("subresource", ""), e.get("time"), decode_fields(e.get("fieldsV1") or {}))  # fmt: skip
        prev = out.get(m.key)
        if prev is not None:
            m.fields |= prev.fields
        out[m.key] = m
    return out


def _encode_managers(managers: dict[tuple[str, str, str, str], _Manager]) -> list[JSON]:
    entries = []
    for m in managers.values():
        if not m.fields:
            continue
        e: JSON = {"manager": m.manager, "operation": m.operation, "apiVersion": m.api_version}
        if m.time:
            e["time"] = m.time
        e["fieldsType"] = "FieldsV1"
        e["fieldsV1"] = encode_fields(m.fields)
        if m.subresource:
            e["subresource"] = m.subresource
        entries.append(e)
    # kube sortEncodedManagedFields: operation, time, manager, apiVersion, subresource.
    entries.sort(key=lambda e: (e["operation"], e.get("time") or "", e["manager"], e["apiVersion"], e.get("subresource", "")))
    return entries


MAX_UPDATE_MANAGERS = 10  # kube fieldmanager DefaultMaxUpdateManagers


def _cap_update_managers(managers: dict[tuple[str, str, str, str], _Manager]) -> None:
    """kube capManagersManager: past 10 Update entries, the oldest merge into "ancient-changes"
    (one bucket per apiVersion, carrying the time of the newest entry merged in)."""
    updaters = sorted((k for k, m in managers.items() if m.operation != "Apply"),
                      key=lambda k: (managers[k].time or "", managers[k].manager))  # fmt: skip
    length = len(updaters)
    first_by_version: dict[str, tuple[str, str, str, str]] = {}
    for k in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        m = managers[k]
        bucket = ("ancient-changes", "Update", m.api_version, "")
        first = first_by_version.get(m.api_version)
        if first is None:
            first_by_version[m.api_version] = k
            continue
        if bucket not in managers:
            f = managers.pop(first)
            managers[bucket] = _Manager("ancient-changes", "Update", m.api_version, "", f.time, f.fields)
        managers[bucket].fields = managers[bucket].fields | m.fields
        managers[bucket].time = m.time
        del managers[k]
        length -= 1


def _set_managed(obj: JSON, managers: dict[tuple[str, str, str, str], _Manager]) -> None:
    _cap_update_managers(managers)
    md = obj.setdefault("metadata", {})
    entries = _encode_managers(managers)
    if entries:
        md["managedFields"] = entries
    else:
        md.pop("managedFields", None)


def _without_managed(obj: JSON | None) -> JSON:
    out = dict(obj or {})
    md = out.get("metadata")
    if isinstance(md, dict) and "managedFields" in md:
        out["metadata"] = {k: v for k, v in md.items() if k != "managedFields"}
    return out


def _take_ownership(managers: dict[tuple[str, str, str, str], _Manager], me: tuple[str, str, str, str],
                    cmp: _Comparison, *, force: bool) -> None:  # fmt: skip
    """SMD ``Updater.update``: others lose changed (conflicting) and removed fields."""
    changed = cmp.modified | cmp.added
    conflicts = {k: m.fields & changed for k, m in managers.items() if k != me and m.fields & changed}
    if conflicts and not force:
        raise _conflict_error(managers, conflicts)
    for k, m in managers.items():
        if k == me:
            continue
        m.fields -= conflicts.get(k, set())
        m.fields -= cmp.removed
    for k in [k for k, m in managers.items() if not m.fields and k != me]:
        del managers[k]


def _conflict_error(managers: dict[tuple[str, str, str, str], _Manager], conflicts: dict[tuple[str, str, str, str], FieldSet]) -> ApplyConflict:
    rows = sorted((managers[k].manager, path_string(p), managers[k].printed()) for k, ps in conflicts.items() for p in ps)
    causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {pm}", "field": ps} for _, ps, pm in rows]
    if len(rows) == 1:
        message = f"Apply failed with 1 conflict: conflict with {rows[0][2]}: {rows[0][1]}"
    else:
        lines: list[str] = []
        for pm in sorted({r[2] for r in rows}):
            lines.append(f"conflicts with {pm}:")
            lines += [f"- {ps}" for _, ps, p2 in rows if p2 == pm]
        message = f"Apply failed with {len(rows)} conflicts: " + "\n".join(lines)
    return ApplyConflict([(m, ps) for m, ps, _ in rows], causes, message)


# --- public API ----------------------------------------------------------------------------------


def server_side_apply(
    live: JSON | None,
    applied: JSON,
    *,
    manager: str,
    force: bool,
    schema: JSON | None,
    subresource: str | None = None,
    now: str,
    status_subresource: bool = True,
) -> JSON:
    """Apply ``applied`` (an apply configuration) to ``live``; return the merged object.

    Semantics (SSA docs, SMD ``Updater.Apply``): the configuration is merged into ``live``
    (objects field by field, ``x-kubernetes-list-type: map`` lists by their keys, ``set`` lists by
    value, atomic lists and ``x-kubernetes-map-type: atomic`` maps replaced); fields this manager
    applied before and omits now are removed unless another manager owns them; the manager's
    ``Apply`` entry in ``metadata.managedFields`` becomes exactly the configuration's field set
    (time ``now``, RFC 3339). Changing a value another manager owns raises
    :class:`ApplyConflict` unless ``force``, which moves the ownership; applying an equal value
    shares it. ``schema`` is the CRD version's ``openAPIV3Schema`` (None for builtins: lists
    atomic except ownerReferences (map on uid), finalizers (set), status.conditions (map on
    type)). With ``status_subresource``, ``status`` is ignored on the main resource; on
    ``subresource="status"`` only ``status`` is merged and ``spec`` is ignored.
    Inputs are not mutated.
    """
    t = _root_type(schema)
    base = _without_managed(live)
    managers = _decode_managers((live or {}).get("metadata", {}).get("managedFields"))
    sub = subresource or ""
    me = (manager, "Apply", "", sub)
    prefixes = _reset_prefixes(subresource, status_subresource)
    if base and not managers:
        # kube skipNonAppliedManager: the first apply to an object nobody manages yet records
        # what exists as owned by "before-first-apply", so applying other values conflicts.
        _record_update(managers, {}, base, t, prefixes, manager="before-first-apply",
                       api_version=str(base.get("apiVersion", "")), subresource=sub, now=now)  # fmt: skip
    cfg = _without_managed(applied)
    # Inside SMD the applier owns everything it sent (metadata.name included, which keeps
    # metadata from being pruned); stripMeta removes those paths afterwards.
    new_set = _drop_prefixed(field_set(cfg, t), prefixes)
    if subresource == "status":
        merge_cfg: JSON = {"status": cfg["status"]} if "status" in cfg else {}
    else:
        merge_cfg = {k: v for k, v in cfg.items() if not (status_subresource and k == "status")}
    merged: JSON = _merge(base, merge_cfg, t) if base else _copy(merge_cfg)
    previous = managers.get(me)
    last = previous.fields if previous else set()
    managers[me] = _Manager(manager, "Apply", str(applied.get("apiVersion", "")), sub, previous.time if previous else None, new_set)
    if last:
        merged = _prune(merged, t, managers, last)
    cmp = _compare(base, merged, t, prefixes)
    _take_ownership(managers, me, cmp, force=force)
    for m in managers.values():
        m.fields -= _STRIP
    if cmp.added or cmp.modified or cmp.removed or managers[me].fields != last or previous is None:
        managers[me].time = now
    if not managers[me].fields:
        del managers[me]
    _set_managed(merged, managers)
    return merged


def _prune(merged: JSON, t: _T, managers: dict[tuple[str, str, str, str], _Manager], last: FieldSet) -> JSON:
    """SMD ``prune``: remove what the applier owned before, is no longer applying and nobody owns."""
    last_en = _ensure_named(last, t)
    pruned = _remove_items(merged, t, last_en)
    managed: FieldSet = set().union(*(m.fields for m in managers.values()))
    merged_en = _ensure_named(field_set(merged, t), t)
    keep = _ensure_named(field_set(pruned, t), t) | _ensure_named(managed, t)
    pruned = _remove_items(merged, t, merged_en - keep)
    dangling = (merged_en - _ensure_named(field_set(pruned, t), t)) & last_en
    if not dangling:
        return merged
    out: JSON = _remove_items(merged, t, dangling)
    return out


def _record_update(managers: dict[tuple[str, str, str, str], _Manager], old: JSON, new: JSON, t: _T,
                   prefixes: tuple[Path, ...], *, manager: str, api_version: str, subresource: str, now: str) -> None:  # fmt: skip
    """managedFieldsUpdater + SMD ``Updater.Update``: changes join ``manager``'s Update entry."""
    cmp = _compare(old, new, t, prefixes)
    current = ("\x00current-operation", "Update", "", "")
    managers[current] = _Manager(current[0], "Update", "", "", None, set())
    _take_ownership(managers, current, cmp, force=True)
    del managers[current]
    owned = _filter(cmp.modified | cmp.added, prefixes)
    if owned:
        key = (manager, "Update", api_version, subresource)
        prev = managers.get(key)
        managers[key] = _Manager(manager, "Update", api_version, subresource, now, owned | (prev.fields if prev else set()))


def update_managed_fields(
    old: JSON | None,
    new: JSON,
    *,
    manager: str,
    operation: str,
    subresource: str | None,
    now: str,
    schema: JSON | None = None,
    status_subresource: bool = True,
) -> None:
    """Record a create/update/patch by ``manager`` in ``new["metadata"]["managedFields"]`` (in place).

    kube fieldmanager ``Update``: the fields this request added or changed (compared with
    ``old``; ``None`` for a create) join the manager's ``Update`` entry (keyed by manager,
    apiVersion, subresource; time ``now``) and leave every other manager's set; removed fields
    leave every set; a request that changes nothing leaves managedFields as they were. The base
    entries come from ``new`` when it carries some, else from ``old``; ``managedFields: []`` (or
    ``[{}]``) in ``new`` resets them. ``operation`` "Apply" is a no-op (server_side_apply did it);
    "Create" is recorded as "Update". ``schema`` as for :func:`server_side_apply`.
    """
    if operation == "Apply":
        return
    t = _root_type(schema)
    md = new.setdefault("metadata", {})
    given = md.get("managedFields")
    if subresource:
        entries = (old or {}).get("metadata", {}).get("managedFields")
    elif given == [] or given == [{}]:
        entries = []
    elif given:
        entries = given
    else:
        entries = (old or {}).get("metadata", {}).get("managedFields")
    managers = _decode_managers(entries)
    prefixes = _reset_prefixes(subresource, status_subresource)
    _record_update(managers, _without_managed(old), _without_managed(new), t, prefixes, manager=manager,
                   api_version=str(new.get("apiVersion", "")), subresource=subresource or "", now=now)  # fmt: skip
    _set_managed(new, managers)
