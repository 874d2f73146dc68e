"""ObjectMeta validation as apimachinery ``ValidateObjectMeta`` does it, returning StatusCauses.

Names: DNS-1123 subdomain (most kinds) or label (namespaces), messages verbatim from
``k8s.io/apimachinery/pkg/util/validation``. Labels: qualified-name keys and label values.
Finalizers: qualified names. ownerReferences: apiVersion, kind, name, uid required.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .selectors import validate_label_key, validate_label_value

JSON = dict[str, Any]

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def _q(v: Any) -> str:
    return json.dumps(v)


def name_causes(name: str, *, label: bool, field: str = "metadata.name") -> list[JSON]:
    """Causes for an invalid object name (DNS-1123 label if ``label`` else subdomain)."""
    out = []
    limit = 63 if label else 253
    if len(name) > limit:
        out.append({
            "reason": "FieldValueInvalid",
            "message": f"Invalid value: {_q(name)}: must be no more than {limit} characters",
            "field": field,
        })
    pattern, msg = (DNS1123_LABEL, LABEL_MSG) if label else (DNS1123_SUBDOMAIN, SUBDOMAIN_MSG)
    if not pattern.match(name):
        out.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {_q(name)}: {msg}", "field": field})
    return out


def meta_causes(md: JSON, *, label_name: bool) -> list[JSON]:
    """Causes for invalid ObjectMeta (name, labels, annotations, finalizers, ownerReferences)."""
    out: list[JSON] = []
    name = md.get("name") or ""
    if not name:
        out.append({
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        })
    else:
        out += name_causes(name, label=label_name)
    labels = md.get("labels") or {}
    if not isinstance(labels, dict):
        labels = {}
    for k, v in labels.items():
        for e in validate_label_key(str(k)):
            out.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {_q(k)}: {e}", "field": "metadata.labels"})
        if not isinstance(v, str):
            out.append({"reason": "FieldValueTypeInvalid", "message": f"Invalid value: {_q(v)}: must be a string", "field": f"metadata.labels.{k}"})
            continue
        for e in validate_label_value(v):
            out.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {_q(v)}: {e}", "field": "metadata.labels"})
    annotations = md.get("annotations") or {}
    if isinstance(annotations, dict):
        total = 0
        for k, v in annotations.items():
            for e in validate_label_key(str(k).lower()):
                out.append({"reason": "FieldValueInvalid", "message": f"Invalid value: {_q(k)}: {e}", "field": "metadata.annotations"})
            total += len(k) + len(str(v))
        if total > TOTAL_ANNOTATION_SIZE_LIMIT:
            out.append({
                "reason": "FieldValueTooLong",
                "message": f"Too long: must have at most {TOTAL_ANNOTATION_SIZE_LIMIT} bytes",
                "field": "metadata.annotations",
            })
    for i, f in enumerate(md.get("finalizers") or []):
        errs = validate_label_key(str(f))
        if errs:
            out.append({
                "reason": "FieldValueInvalid",
                "message": f"Invalid value: {_q(f)}: {errs[0]}",
                "field": f"metadata.finalizers[{i}]",
            })
    for i, ref in enumerate(md.get("ownerReferences") or []):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not (isinstance(ref, dict) and ref.get(key)):
                out.append({
                    "reason": "FieldValueRequired" if key != "apiVersion" else "FieldValueInvalid",
                    "message": "Required value" if key != "apiVersion" else "Invalid value: \"\": version must not be empty",
                    "field": f"metadata.ownerReferences[{i}].{key}",
                })
    controllers = [r for r in md.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")]
    if len(controllers) > 1:
        out.append({
            "reason": "FieldValueInvalid",
            "message": "Invalid value: " + _q(md.get("ownerReferences")) + ": Only one reference can have Controller set to true",
            "field": "metadata.ownerReferences",
        })
    return out
