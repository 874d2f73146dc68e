"""Server-side printing: ``meta.k8s.io/v1`` Table responses (``Accept: ...;as=Table``).

Sources: apiextensions-apiserver ``registry/customresource/tableconvertor`` (Name column plus
``additionalPrinterColumns`` evaluated with JSONPath, typed by ``cellForJSONValue``; ``Age`` when a
CRD declares none), apiserver ``registry/rest/table.go`` (default Name / Created At),
kubernetes ``pkg/printers/internalversion`` (Namespace, ConfigMap, Secret, Lease, Event columns),
apimachinery ``util/duration.HumanDuration`` (ages) and handlers ``transformObject``
(includeObject None/Metadata/Object). Pure: no I/O; ``now`` is injectable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["evaluate_jsonpath", "human_duration", "to_table"]

JSON = dict[str, Any]

NAME_DESC = (
    "Name must be unique within a namespace. Is required when creating resources, although some "
    "resources may allow a client to request the generation of an appropriate name automatically. "
    "Name is primarily intended for creation idempotence and configuration definition. Cannot be "
    "updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
CREATED_DESC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It "
    "is not guaranteed to be set in happens-before order across separate operations. Clients may not "
    "set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. "
    "Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def human_duration(seconds: float) -> str:
    """Render a duration like apimachinery ``duration.HumanDuration`` ("5s", "3m2s", "4h", "2d").

    ``seconds`` below -1 is ``<invalid>`` (clock skew tolerance of 2 s), below 0 is ``0s``.
    """
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rem = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rem == 0 else f"{hours // 24 // 365}y{rem}d"
    return f"{hours // 24 // 365}y"


def _parse_time(v: Any) -> datetime | None:
    if not isinstance(v, str) or not v:
        return None
    try:
        t = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _since(v: Any, now: datetime, *, invalid: str = "<unknown>") -> str:
    """``translateTimestampSince``: ``<unknown>`` for a missing/zero time."""
    t = _parse_time(v)
    if t is None:
        return invalid if v else "<unknown>"
    return human_duration((now - t).total_seconds())


# --- JSONPath subset (client-go util/jsonpath) --------------------------------------------------

_TOKEN_RE = re.compile(
    r"""\.\.?(?P<field>(?:[A-Za-z0-9_\-/$]|\\\.)+)
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*\*\s*\]|\.\*
      | \[\s*(?P<q>['"])(?P<key>.*?)(?P=q)\s*\]
      | \[\s*\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_\-/]+)+)\s*(?P<op>==|!=|<=|>=|<|>)\s*(?P<lit>"[^"]*"|'[^']*'|[^)\s]+)\s*\)\s*\]
      | \[\s*\?\(\s*@(?P<epath>(?:\.[A-Za-z0-9_\-/]+)+)\s*\)\s*\]
    """,
    re.X,
)


def _literal(text: str) -> Any:
    if text[:1] in "\"'":
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _walk(v: Any, dotted: str) -> tuple[bool, Any]:
    for part in dotted.strip(".").split("."):
        if not isinstance(v, dict) or part not in v:
            return False, None
        v = v[part]
    return True, v


def _compare(a: Any, op: str, b: Any) -> bool:
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    try:
        return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])
    except TypeError:
        return False


def evaluate_jsonpath(path: str, obj: Any) -> list[Any]:
    """Evaluate a printer-column JSONPath (``.spec.x``, ``.items[0].a``, ``[*]``,
    ``[?(@.type=="Ready")]``, ``['a.b']``); return all matches in order (empty when none).

    Raises ValueError on syntax outside this subset. Braces (``{.spec.x}``) are accepted.
    """
    p = path.strip()
    if p.startswith("{") and p.endswith("}"):
        p = p[1:-1].strip()
    if p in ("", ".", "@", "$"):
        return [obj]
    if p[0] in "@$":
        p = p[1:]
    current = [obj]
    pos = 0
    while pos < len(p):
        m = _TOKEN_RE.match(p, pos)
        if m is None:
            raise ValueError(f"unrecognized character in action: {p[pos:]!r}")
        pos = m.end()
        nxt: list[Any] = []
        for v in current:
            if m.group("field") is not None:
                name = m.group("field").replace("\\.", ".")  # client-go: ``\.`` is a dot of the key
                if isinstance(v, dict) and name in v:
                    nxt.append(v[name])
            elif m.group("index") is not None:
                i = int(m.group("index"))
                if isinstance(v, list) and -len(v) <= i < len(v):
                    nxt.append(v[i])
            elif m.group("key") is not None:
                if isinstance(v, dict) and m.group("key") in v:
                    nxt.append(v[m.group("key")])
            elif m.group("fpath") is not None or m.group("epath") is not None:
                items = v if isinstance(v, list) else [v]
                for item in items:
                    found, val = _walk(item, m.group("fpath") or m.group("epath"))
                    if m.group("epath") is not None:
                        if found:
                            nxt.append(item)
                    elif found and _compare(val, m.group("op"), _literal(m.group("lit"))):
                        nxt.append(item)
            elif isinstance(v, list):  # wildcard
                nxt.extend(v)
            elif isinstance(v, dict):
                nxt.extend(v.values())
        current = nxt
    return current


def go_print(v: Any) -> str:
    """Go ``fmt`` ``%v`` of a JSON value, as jsonpath ``PrintResults`` prints a string column."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e21 else repr(v)
    if isinstance(v, list):
        return "[" + " ".join(go_print(x) for x in v) + "]"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_print(v[k])}" for k in sorted(v)) + "]"
    return str(v)


def _cell(col_type: str, value: Any, now: datetime) -> Any:
    """``cellForJSONValue`` plus the string branch: a value of the wrong type becomes null."""
    if value is None:
        return None
    if col_type == "string":
        return go_print(value)
    if col_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if col_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if col_type == "boolean" and isinstance(value, bool):
        return value
    if col_type == "date" and isinstance(value, str):
        return _since(value, now, invalid="<invalid>")
    return None


# --- builtin printers (pkg/printers/internalversion) --------------------------------------------


def _col(name: str, typ: str = "string", desc: str = "", fmt: str = "", priority: int = 0) -> JSON:
    return {"name": name, "type": typ, "format": fmt, "description": desc, "priority": priority}


_NAME_COL = _col("Name", "string", NAME_DESC, "name")
_AGE_COL = _col("Age", "string", CREATED_DESC)

Printer = tuple[list[JSON], Callable[[JSON, datetime], list[Any]]]


def _age(o: JSON, now: datetime) -> str:
    return _since((o.get("metadata") or {}).get("creationTimestamp"), now)


def _name(o: JSON) -> str:
    return str((o.get("metadata") or {}).get("name", ""))


def _event_cells(o: JSON, now: datetime) -> list[Any]:
    # events.k8s.io/v1 names (regarding, note, deprecated*) map onto core/v1 ones.
    involved = o.get("involvedObject") or o.get("regarding") or {}
    first_ts = o.get("firstTimestamp") or o.get("deprecatedFirstTimestamp")
    first = _since(first_ts, now) if first_ts else _since(o.get("eventTime"), now)
    last_ts = o.get("lastTimestamp") or o.get("deprecatedLastTimestamp")
    last = _since(last_ts, now) if last_ts else first
    count: Any = o.get("count") or o.get("deprecatedCount") or 0
    series = o.get("series")
    if isinstance(series, dict):
        last = _since(series.get("lastObservedTime"), now)
        count = series.get("count", count)
    elif not count:
        count = 1
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    src = o.get("source") or {}
    component = src.get("component") or o.get("reportingController") or o.get("reportingComponent") or ""
    host = src.get("host") or o.get("reportingInstance") or ""
    source = f"{component}, {host}" if host else component
    message = str(o.get("message") or o.get("note") or "").strip()
    return [last, o.get("type", ""), o.get("reason", ""), target, involved.get("fieldPath", ""), source,
            message, first, int(count), _name(o)]  # fmt: skip


_BUILTIN: dict[str, Printer] = {
    "Namespace": (
        [_NAME_COL, _col("Status", desc="The status of the namespace"), _AGE_COL],
        lambda o, now: [_name(o), (o.get("status") or {}).get("phase", ""), _age(o, now)],
    ),
    "ConfigMap": (
        [_NAME_COL, _col("Data", desc="Data contains the configuration data."), _AGE_COL],
        lambda o, now: [_name(o), len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o, now)],
    ),
    "Secret": (
        [_NAME_COL, _col("Type", desc="Used to facilitate programmatic handling of secret data."),
         _col("Data", desc="Data contains the secret data."), _AGE_COL],
        lambda o, now: [_name(o), o.get("type", ""), len(o.get("data") or {}) + len(o.get("stringData") or {}), _age(o, now)],
    ),
    "Lease": (
        [_NAME_COL, _col("Holder", desc="holderIdentity contains the identity of the holder of a current lease."), _AGE_COL],
        lambda o, now: [_name(o), (o.get("spec") or {}).get("holderIdentity", ""), _age(o, now)],
    ),
    "Event": (
        [
            _col("Last Seen", desc="Time when this Event was last observed."),
            _col("Type", desc="Type of this event (Normal, Warning), new types could be added in the future."),
            _col("Reason", desc="This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
            _col("Object", desc="The object that this event is about."),
            _col("Subobject", desc="The subobject (fieldPath) of the involved object.", priority=1),
            _col("Source", desc="The component reporting this event. Should be a short machine understandable string.", priority=1),
            _col("Message", desc="A human-readable description of the status of this operation."),
            _col("First Seen", desc="The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)", priority=1),
            _col("Count", desc="The number of times this event has occurred.", priority=1),
            _col("Name", desc=NAME_DESC, fmt="name", priority=1),
        ],
        _event_cells,
    ),
}

# apiserver registry/rest/table.go defaultTableConvertor: kinds without a dedicated printer.
_DEFAULT: Printer = (
    [_NAME_COL, _col("Created At", "date", CREATED_DESC)],
    lambda o, now: [_name(o), (o.get("metadata") or {}).get("creationTimestamp")],
)

# apiextensions: a CRD version without additionalPrinterColumns prints Age from creationTimestamp.
_CRD_AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp", "description": CREATED_DESC}


def _crd_printer(columns: list[JSON]) -> Printer:
    cols = columns or [_CRD_AGE_COLUMN]
    defs = [_NAME_COL] + [
        _col(c["name"], c.get("type", "string"), c.get("description", ""), c.get("format", ""), int(c.get("priority", 0)))
        for c in cols
    ]

    def cells(o: JSON, now: datetime) -> list[Any]:
        row: list[Any] = [_name(o)]
        for c in cols:
            try:
                found = evaluate_jsonpath(c.get("jsonPath", ""), o)
            except ValueError:
                found = []
            row.append(_cell(c.get("type", "string"), found[0], now) if found else None)
        return row

    return defs, cells


def _row_object(o: JSON, include_object: str) -> Any:
    if include_object == "Object":
        return o
    if include_object == "None":
        return None
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o.get("metadata") or {}}


def to_table(
    objs: list[JSON],
    columns: list[JSON] | None,
    *,
    list_rv: str,
    continue_token: str | None,
    include_object: str = "Metadata",
    now: datetime | None = None,
    kind: str | None = None,
    remaining_item_count: int | None = None,
) -> JSON:
    """Build a ``meta.k8s.io/v1`` Table for ``objs``.

    ``columns``: the CRD version's ``additionalPrinterColumns`` (``[]`` -> the default Age column),
    or None for builtin kinds, which use kube's printer for ``kind`` (or ``objs[0]["kind"]``):
    Namespace, ConfigMap, Secret, Lease, Event; other kinds get Name / Created At. Each row has
    ``cells`` and ``object``: PartialObjectMetadata for ``include_object="Metadata"`` (default), the
    object for ``"Object"``, null for ``"None"``. Ages are rendered relative to ``now`` (UTC,
    default: the current time). ``list_rv``/``continue_token``/``remaining_item_count`` fill
    the Table's ListMeta.
    """
    now = now or datetime.now(UTC)
    if columns is not None:
        defs, cells = _crd_printer(columns)
    else:
        k = kind or (objs[0].get("kind") if objs else None) or ""
        defs, cells = _BUILTIN.get(k, _DEFAULT)
    meta: JSON = {"resourceVersion": list_rv}
    if continue_token:
        meta["continue"] = continue_token
    if remaining_item_count is not None:
        meta["remainingItemCount"] = remaining_item_count
    rows = [{"cells": cells(o, now), "object": _row_object(o, include_object)} for o in objs]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "columnDefinitions": defs, "rows": rows}
