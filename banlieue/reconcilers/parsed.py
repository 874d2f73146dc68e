"""Parsed API models reused while an object's resourceVersion stays the same.

Every VirtualMachine reconcile reads its namespace's Providers, its VMClass and its VMImage from
the cache; validating them with pydantic on every reconcile cost about 7% of the manager's CPU
while 1,000 VMs were provisioned (docs/performance.md), although they rarely change. The models
handed out are shared between reconciles: callers must not mutate them (the decide functions
are pure and only read them).

``parse_provider`` is the vSphere Provider read the VSphereMachine and Provider controllers share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from banlieue.api.meta import ApiModel
from banlieue.api.provider import Provider
from banlieue.reconcilers.kinds import PROVIDER_CLASS_VSPHERE

M = TypeVar("M", bound=ApiModel)

MAX_ENTRIES = 4096
"""Entries kept before the memo starts over (Providers, VMClasses and VMImages are few; the
bound only keeps deleted objects from accumulating)."""


class ParsedCache:
    """``parse(model, raw)`` -> the model, or None when ``raw`` is None or does not validate
    (``on_invalid(raw, error)`` is called then, once per resourceVersion). Keyed by model,
    namespace and name; a hit needs the same non-empty ``metadata.resourceVersion``."""

    def __init__(self, on_invalid: Callable[[Mapping[str, Any], ValidationError], None] | None = None) -> None:
        self._memo: dict[tuple[type[ApiModel], str, str], tuple[str, ApiModel | None]] = {}
        self._on_invalid = on_invalid

    def parse(self, model: type[M], raw: Mapping[str, Any] | None) -> M | None:
        if raw is None:
            return None
        meta = raw.get("metadata") or {}
        rv = str(meta.get("resourceVersion") or "")
        key = (model, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        hit = self._memo.get(key)
        if rv and hit is not None and hit[0] == rv:
            return hit[1]  # type: ignore[return-value]
        parsed: M | None
        try:
            parsed = model.from_wire(dict(raw))
        except ValidationError as err:
            parsed = None
            if self._on_invalid is not None:
                self._on_invalid(raw, err)
        if rv:
            if len(self._memo) >= MAX_ENTRIES:
                self._memo.clear()
            self._memo[key] = (rv, parsed)
        return parsed


def parse_provider(obj: Mapping[str, Any], parsed: ParsedCache | None = None) -> Provider | None:
    """A vSphere Provider model, None for another provider class or a malformed object.
    ``parsed``: reuse the model while the object's resourceVersion holds (a reconciler's memo)."""
    if parsed is not None:
        provider = parsed.parse(Provider, obj)
    else:
        try:
            provider = Provider.from_wire(dict(obj))
        except ValidationError:
            return None
    return provider if provider is not None and provider.spec.provider_class_ref.name == PROVIDER_CLASS_VSPHERE else None
