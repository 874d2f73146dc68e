"""Conversion between core/v1 Event and events.k8s.io/v1 Event (one storage, two API shapes).

kube-apiserver stores both in one resource and converts on read (``pkg/apis/events/v1``
conversion): regarding <-> involvedObject, note <-> message, reportingController <->
reportingComponent, deprecatedSource/FirstTimestamp/LastTimestamp/Count <-> source/
firstTimestamp/lastTimestamp/count. The double keeps each event in the shape it was written and
converts when it is read through the other API.
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]

# events.k8s.io/v1 field -> core/v1 field
_NEW_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_CORE_TO_NEW = {v: k for k, v in _NEW_TO_CORE.items()}
EVENTS_V1 = "events.k8s.io/v1"


def convert(obj: JSON, api_version: str) -> JSON:
    """``obj`` (either Event shape) in the shape of ``api_version`` (``v1`` or ``events.k8s.io/v1``)."""
    src = obj.get("apiVersion")
    if src == api_version:
        return obj
    table = _NEW_TO_CORE if api_version == "v1" else _CORE_TO_NEW
    out: JSON = {}
    for k, v in obj.items():
        out[table.get(k, k)] = v
    out["apiVersion"] = api_version
    return out
