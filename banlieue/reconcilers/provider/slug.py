"""Names and label values derived from vSphere inventory names (SPEC §2 Provider failure domains).

- ``slug(text)``: SPEC §2 failure-domain name rule: lower-case ASCII letters and digits are kept
  (ASCII upper case is lowered first, so ``DC0`` keeps its letters), every other run of
  characters (symbols, spaces, any non-ASCII character, accented letters included) becomes one
  ``-``, leading/trailing ``-`` are trimmed, the result is cut to at most 63 characters and
  trimmed of ``-`` again. The result is a valid RFC 1123 label (or empty when the input has no
  ASCII letter or digit).
- ``unique_slugs(items)``: the failure-domain names of one Provider. Two (datacenter, cluster)
  pairs may slug to the same name (``a b`` and ``a-b``, or two long names cut at 63); then every
  member of the colliding group gets ``-`` plus 8 hex digits of sha256 over ``datacenter/cluster``
  appended (cut so the total stays <= 63), so names are unique and do not depend on list order.
- ``label_value(text)``: a valid Kubernetes label value (apimachinery
  ``validation.IsValidLabelValue``: at most 63 characters of ``[A-Za-z0-9._-]``, beginning and
  ending with an alphanumeric): every run of other characters becomes ``-``, the ends are trimmed
  to alphanumerics, case is kept (label values are case-sensitive; selectors written with the
  vSphere name keep working when it is plain ASCII). The exact vSphere names are kept in
  ``attributes.raw``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

MAX_NAME = 63
"""RFC 1123 label / Kubernetes label value length limit."""

_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


def _ascii_lower(text: str) -> str:
    # str.lower() maps some non-ASCII letters to ASCII ones (e.g. KELVIN SIGN -> "k"); the SPEC
    # keeps only ASCII letters, so lower ASCII A-Z alone.
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in text)


def slug(text: str, max_len: int = MAX_NAME) -> str:
    """The SPEC §2 slug of ``text`` (see module docstring); may be empty."""
    out = _NOT_SLUG.sub("-", _ascii_lower(text)).strip("-")
    return out[:max_len].rstrip("-")


def _suffix(datacenter: str, cluster: str) -> str:
    return hashlib.sha256(f"{datacenter}/{cluster}".encode()).hexdigest()[:8]


def unique_slugs(provider: str, pairs: Sequence[tuple[str, str]]) -> list[str]:
    """Failure-domain names for ``pairs`` of (datacenter, cluster) of Provider ``provider``,
    in the same order: slug(``<provider>-<datacenter>-<cluster>``), de-duplicated as the module
    docstring says. An empty slug (no ASCII letter or digit anywhere) becomes ``fd-<hash>``."""
    base = [slug(f"{provider}-{dc}-{cl}") for dc, cl in pairs]
    counts: dict[str, int] = {}
    for name in base:
        counts[name] = counts.get(name, 0) + 1
    out: list[str] = []
    for name, (dc, cl) in zip(base, pairs, strict=True):
        if name and counts[name] == 1:
            out.append(name)
            continue
        tail = _suffix(dc, cl)
        head = name[: MAX_NAME - len(tail) - 1].rstrip("-") or "fd"
        out.append(f"{head}-{tail}")
    return out


def label_value(text: str) -> str:
    """``text`` as a valid label value (see module docstring); may be empty (a valid value)."""
    out = _LABEL_EDGE.sub("", _NOT_LABEL.sub("-", text))
    return _LABEL_EDGE.sub("", out[:MAX_NAME])


def is_slug(text: str) -> bool:
    """Whether ``text`` is a non-empty slug as produced by ``slug`` (RFC 1123 label)."""
    return bool(text) and len(text) <= MAX_NAME and slug(text) == text


__all__ = ["MAX_NAME", "is_slug", "label_value", "slug", "unique_slugs"]
