"""Decoding of Kubernetes protobuf request bodies for the builtin kinds the double serves.

kubectl's typed clients (``kubectl create namespace|configmap|secret``, leases, events) send
``Content-Type: application/vnd.kubernetes.protobuf``. The body is the 4-byte magic ``k8s\\0``
followed by a ``runtime.Unknown`` message (typeMeta=1 {apiVersion=1, kind=2}, raw=2) whose ``raw``
is the typed object. Field numbers come from the ``generated.proto`` files of k8s.io/api and
apimachinery. Responses are always JSON (clients accept it). Unknown fields are skipped.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]
MAGIC = b"k8s\x00"

# A schema maps a field number to (json name, type); type is a str tag or a nested schema dict.
Schema = dict[int, tuple[str, Any]]

TIME: Schema = {1: ("seconds", "int"), 2: ("nanos", "int")}
OWNER_REF: Schema = {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
                     6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
OBJECT_META: Schema = {
    1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 4: ("selfLink", "str"),
    5: ("uid", "str"), 6: ("resourceVersion", "str"), 7: ("generation", "int"),
    8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"), 10: ("deletionGracePeriodSeconds", "int"),
    11: ("labels", "map"), 12: ("annotations", "map"), 13: ("ownerReferences", ("list", OWNER_REF)),
    14: ("finalizers", "strlist"),
}
OBJECT_REF: Schema = {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str"), 4: ("uid", "str"),
                      5: ("apiVersion", "str"), 6: ("resourceVersion", "str"), 7: ("fieldPath", "str")}
SERIES: Schema = {1: ("count", "int"), 2: ("lastObservedTime", "microtime")}
RESOURCE_ATTRS: Schema = {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"), 4: ("version", "str"),
                          5: ("resource", "str"), 6: ("subresource", "str"), 7: ("name", "str")}
NON_RESOURCE_ATTRS: Schema = {1: ("path", "str"), 2: ("verb", "str")}
KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "ConfigMap"): {1: ("metadata", OBJECT_META), 2: ("data", "map"), 3: ("binaryData", "bytesmap"),
                          4: ("immutable", "bool")},
    ("v1", "Secret"): {1: ("metadata", OBJECT_META), 2: ("data", "bytesmap"), 3: ("type", "str"),
                       4: ("stringData", "map"), 5: ("immutable", "bool")},
    ("v1", "Namespace"): {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", "strlist")}),
                          3: ("status", {1: ("phase", "str")})},
    ("v1", "ServiceAccount"): {1: ("metadata", OBJECT_META), 2: ("secrets", ("list", OBJECT_REF)),
                               3: ("imagePullSecrets", ("list", {1: ("name", "str")})),
                               4: ("automountServiceAccountToken", "bool")},
    ("v1", "Event"): {
        1: ("metadata", OBJECT_META), 2: ("involvedObject", OBJECT_REF), 3: ("reason", "str"), 4: ("message", "str"),
        5: ("source", {1: ("component", "str"), 2: ("host", "str")}), 6: ("firstTimestamp", "time"),
        7: ("lastTimestamp", "time"), 8: ("count", "int"), 9: ("type", "str"), 10: ("eventTime", "microtime"),
        11: ("series", SERIES), 12: ("action", "str"), 13: ("related", OBJECT_REF),
        14: ("reportingComponent", "str"), 15: ("reportingInstance", "str"),
    },
    ("events.k8s.io/v1", "Event"): {
        1: ("metadata", OBJECT_META), 2: ("eventTime", "microtime"), 3: ("series", SERIES),
        4: ("reportingController", "str"), 5: ("reportingInstance", "str"), 6: ("action", "str"),
        7: ("reason", "str"), 8: ("regarding", OBJECT_REF), 9: ("related", OBJECT_REF), 10: ("note", "str"),
        11: ("type", "str"), 12: ("deprecatedSource", {1: ("component", "str"), 2: ("host", "str")}),
        13: ("deprecatedFirstTimestamp", "time"), 14: ("deprecatedLastTimestamp", "time"),
        15: ("deprecatedCount", "int"),
    },
    ("coordination.k8s.io/v1", "Lease"): {
        1: ("metadata", OBJECT_META),
        2: ("spec", {1: ("holderIdentity", "str"), 2: ("leaseDurationSeconds", "int"), 3: ("acquireTime", "microtime"),
                     4: ("renewTime", "microtime"), 5: ("leaseTransitions", "int"), 6: ("strategy", "str"),
                     7: ("preferredHolder", "str")}),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {
        1: ("metadata", OBJECT_META), 2: ("spec", {1: ("resourceAttributes", RESOURCE_ATTRS),
                                                   2: ("nonResourceAttributes", NON_RESOURCE_ATTRS)}),
    },
    ("authorization.k8s.io/v1", "SubjectAccessReview"): {
        1: ("metadata", OBJECT_META), 2: ("spec", {1: ("resourceAttributes", RESOURCE_ATTRS),
                                                   2: ("nonResourceAttributes", NON_RESOURCE_ATTRS),
                                                   3: ("user", "str"), 4: ("groups", "strlist"), 6: ("uid", "str")}),
    },
    ("v1", "DeleteOptions"): {1: ("gracePeriodSeconds", "int"),
                              2: ("preconditions", {1: ("uid", "str"), 2: ("resourceVersion", "str")}),
                              3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"),
                              5: ("dryRun", "strlist")},
}


class ProtobufError(ValueError):
    """A body that is not a decodable Kubernetes protobuf message of a known kind."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ProtobufError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _varint(buf, i)
            out.append((num, v))
        elif wt == 2:
            n, i = _varint(buf, i)
            out.append((num, buf[i:i + n]))
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ProtobufError(f"unsupported wire type {wt}")
    return out


def _time(buf: bytes, micro: bool) -> str:
    t = _message(buf, TIME)
    dt = datetime.fromtimestamp(int(t.get("seconds", 0)), UTC)
    if micro:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t.get('nanos', 0)) // 1000:06d}Z"
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def _message(buf: bytes, schema: Schema) -> JSON:
    out: JSON = {}
    for num, raw in _fields(buf):
        spec = schema.get(num)
        if spec is None:
            continue
        name, typ = spec
        # Go marshals non-pointer fields even when empty; JSON (omitempty) would not carry them.
        if isinstance(raw, int):
            if typ == "int" and raw == 0 and name == "generation":
                continue
            if typ == "bool":
                out[name] = bool(raw)
            else:
                out[name] = raw - (1 << 64) if raw >= 1 << 63 else raw
            continue
        if typ == "str":
            if raw:
                out[name] = raw.decode()
        elif typ in ("time", "microtime"):
            if _message(raw, TIME).get("seconds"):
                out[name] = _time(raw, typ == "microtime")
        elif typ in ("map", "bytesmap"):
            entry = dict(_fields(raw))
            k = entry.get(1, b"")
            v = entry.get(2, b"")
            key = k.decode() if isinstance(k, bytes) else str(k)
            val = v if isinstance(v, bytes) else b""
            out.setdefault(name, {})[key] = base64.b64encode(val).decode() if typ == "bytesmap" else val.decode()
        elif typ == "strlist":
            out.setdefault(name, []).append(raw.decode())
        elif isinstance(typ, tuple):
            out.setdefault(name, []).append(_message(raw, typ[1]))
        elif isinstance(typ, dict):
            out[name] = _message(raw, typ)
    return out


def decode(body: bytes) -> JSON:
    """Decode a ``k8s\\0``-prefixed protobuf body into the JSON form (with apiVersion and kind).

    Raises ProtobufError for a missing magic, malformed data or a kind this double does not know.
    """
    if not body.startswith(MAGIC):
        raise ProtobufError("missing k8s protobuf magic prefix")
    envelope = dict(_fields(body[len(MAGIC):]))
    tm = envelope.get(1, b"")
    raw = envelope.get(2, b"")
    if not isinstance(tm, bytes) or not isinstance(raw, bytes):
        raise ProtobufError("malformed runtime.Unknown envelope")
    type_meta = dict(_fields(tm))
    api_version = type_meta.get(1, b"")
    kind = type_meta.get(2, b"")
    av = api_version.decode() if isinstance(api_version, bytes) else ""
    k = kind.decode() if isinstance(kind, bytes) else ""
    schema = KINDS.get((av, k)) or (KINDS.get(("v1", k)) if k == "DeleteOptions" else None)
    if schema is None:
        raise ProtobufError(f"no protobuf decoding for {av} {k}")
    obj = _message(raw, schema)
    if k != "DeleteOptions":
        obj = {"apiVersion": av, "kind": k, **obj}
    return obj
