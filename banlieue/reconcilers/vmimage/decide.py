"""VMImage reconciler, pure part: ``Snapshot`` -> ``decide`` -> ``Plan`` (SPEC §2 VMImage).

Rules (SPEC §2; *decision* where it is silent):

- A row of ``status.perProvider`` exists for every Provider (all namespaces) of class
  ``vsphere`` for which ``spec.sources[]`` has a ``providerClass: vsphere`` entry
  (*decision*: the first such entry is used). Providers of other classes are not this role's
  and get no row; rows of deleted Providers disappear. Rows are sorted by (namespace, name).
- The template is looked up by name in every datacenter of the Provider's failure domains
  (*decision*: all of the Provider's datacenters must have it, because a VM may be placed in
  any of its failure domains and the clone happens in that datacenter; a template present in
  some datacenters only gives ``ready: false``, reason ``TemplateNotFound``, naming the
  datacenters it is missing from). A Provider with no known failure domains yet is searched
  in every datacenter (the first match).
- ``resolvedRef``: the template's managed object id (``vm-42``) when one datacenter was
  searched; with several, ``<datacenter>:<moref>`` pairs joined by ``,`` sorted by datacenter.
- Row reasons: ``Reconciled`` (found), ``TemplateNotFound``, ``SecretUnavailable`` (the
  Provider's Secret/CA object is missing or a key is invalid), ``ConnectFailed`` (login refused,
  TLS, vCenter unreachable: reasons AuthFailed, TLSVerifyFailed, Transient; and the config error
  ``TLSVerifyFailed`` of a CA bundle that is not valid PEM, with the Provider's own message),
  ``LookupFailed`` (any other backend error).
- ``Ready`` (*decision*): True (``Reconciled``) when the image is ready on at least one
  Provider (the scheduler places only on Providers where the row is ready), with a message
  listing where it is missing; False when it is ready nowhere: reason of the first row, or
  ``NoMatchingProvider`` when there is no row.
- Requeue after ``REFRESH_SECONDS`` (templates appear and vanish without notification).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from banlieue.api.conditions import READY, get_condition, set_condition
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import Provider
from banlieue.api.vmimage import (
    ImageProviderStatus,
    ImageReason,
    VMImage,
    VMImageConditionReason,
    VMImageStatus,
)
from banlieue.backends.base import AuthFailed, TemplateInfo, TLSVerifyFailed, Transient
from banlieue.reconcilers.kinds import PROVIDER_CLASS_VSPHERE

REFRESH_SECONDS = 300.0
"""Periodic re-lookup of templates (seconds)."""
NO_MATCHING_PROVIDER = VMImageConditionReason.NO_MATCHING_PROVIDER
CONNECT_REASONS = frozenset({AuthFailed.__name__, TLSVerifyFailed.__name__, Transient.__name__})
"""Backend error taxonomy names (``backends.base.taxonomy``) reported as ``ConnectFailed``."""
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Lookup:
    """The result of looking one Provider's template up. ``config_error``: (reason, message)
    when the connection could not be built; ``backend_error``: (BackendError.reason, message);
    else ``found``: (datacenter searched (None = any), template or None) per datacenter."""

    config_error: tuple[str, str] | None = None
    backend_error: tuple[str, str] | None = None
    found: tuple[tuple[str | None, TemplateInfo | None], ...] = ()


@dataclass(frozen=True)
class Target:
    """A Provider the image must be looked up on: ``ref`` is the template name, ``datacenters``
    the Provider's known datacenters (empty: search all)."""

    namespace: str
    name: str
    ref: str
    datacenters: tuple[str, ...]


@dataclass(frozen=True)
class Snapshot:
    """The VMImage, the Providers (cache) and the lookups keyed by (namespace, name)."""

    image: VMImage
    providers: tuple[Provider, ...]
    now: datetime
    lookups: dict[tuple[str, str], Lookup] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """``status``: the full desired status; ``write_status`` False when unchanged."""

    status: VMImageStatus
    write_status: bool
    events: tuple[tuple[Literal["Normal", "Warning"], str, str], ...] = ()
    requeue_after: float = REFRESH_SECONDS


def source_ref(image: VMImage) -> str | None:
    """The template name of the image's first ``vsphere`` source (None: no such source)."""
    for src in image.spec.sources or ():
        if src.provider_class == PROVIDER_CLASS_VSPHERE and src.kind == "Template":
            return src.ref
    return None


def targets(image: VMImage, providers: Sequence[Provider]) -> list[Target]:
    """Providers to look the image up on, sorted by (namespace, name) (module docstring)."""
    ref = source_ref(image)
    if ref is None:
        return []
    out: list[Target] = []
    for p in providers:
        if p.spec.provider_class_ref.name != PROVIDER_CLASS_VSPHERE:
            continue
        dcs = sorted(
            {
                fd.attributes.raw.datacenter
                for fd in (p.status.failure_domains or [] if p.status else [])
                if fd.attributes is not None and fd.attributes.raw is not None and fd.attributes.raw.datacenter
            }
        )
        out.append(Target(p.metadata.namespace or "", p.metadata.name or "", ref, tuple(dcs)))
    return sorted(out, key=lambda t: (t.namespace, t.name))


def _cut(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."


def row_for(target: Target, lookup: Lookup | None) -> ImageProviderStatus:
    """The perProvider row of one Provider (module docstring reasons)."""
    ns, name, ref = target.namespace or "-", target.name or "-", target.ref
    if lookup is None:
        return ImageProviderStatus(
            provider_name=name, provider_namespace=ns, reason=ImageReason.LOOKUP_FAILED, message="not looked up yet"
        )
    if lookup.config_error is not None and lookup.config_error[0] == TLSVerifyFailed.reason:
        # A CA bundle that is not PEM: the Provider shows TLSVerifyFailed with this very message.
        return ImageProviderStatus(
            provider_name=name, provider_namespace=ns, reason=ImageReason.CONNECT_FAILED, message=_cut(lookup.config_error[1])
        )
    if lookup.config_error is not None:
        return ImageProviderStatus(
            provider_name=name,
            provider_namespace=ns,
            reason=ImageReason.SECRET_UNAVAILABLE,
            message=_cut(f"Provider credentials unavailable ({lookup.config_error[0]}): {lookup.config_error[1]}"),
        )
    if lookup.backend_error is not None:
        err_reason, err_msg = lookup.backend_error
        reason = ImageReason.CONNECT_FAILED if err_reason in CONNECT_REASONS else ImageReason.LOOKUP_FAILED
        return ImageProviderStatus(
            provider_name=name, provider_namespace=ns, reason=reason, message=_cut(f"{err_reason}: {err_msg}")
        )
    hits = [(dc, t) for dc, t in lookup.found if t is not None]
    misses = sorted(dc or "any datacenter" for dc, t in lookup.found if t is None)
    if hits and not misses:
        if len(lookup.found) == 1:
            resolved = hits[0][1].moref if hits[0][1] is not None else None
        else:
            resolved = ",".join(sorted(f"{dc or (t.datacenter if t else '')}:{t.moref if t else ''}" for dc, t in hits))
        where = ", ".join(sorted({t.datacenter for _, t in hits if t is not None}))
        return ImageProviderStatus(
            provider_name=name,
            provider_namespace=ns,
            ready=True,
            resolved_ref=resolved,
            reason=ImageReason.RECONCILED,
            message=f"template {ref!r} found in {where}",
        )
    if hits:
        found_in = ", ".join(sorted(dc or "?" for dc, _ in hits))
        msg = f"template {ref!r} found in {found_in} but missing in {', '.join(misses)}: VMs may be placed in any datacenter of the Provider"
    elif misses:
        msg = f"template {ref!r} not found in {', '.join(misses)}"
    else:
        msg = f"template {ref!r} not found: the Provider has no datacenter"
    return ImageProviderStatus(
        provider_name=name, provider_namespace=ns, reason=ImageReason.TEMPLATE_NOT_FOUND, message=_cut(msg)
    )


def decide(snap: Snapshot) -> Plan:
    """The Plan for ``snap`` (module docstring rules). Never raises."""
    img = snap.image
    gen = img.metadata.generation
    current = img.status or VMImageStatus()
    rows = [row_for(t, snap.lookups.get((t.namespace, t.name))) for t in targets(img, snap.providers)]
    ready_on = [f"{r.provider_namespace}/{r.provider_name}" for r in rows if r.ready]
    missing = [f"{r.provider_namespace}/{r.provider_name} ({r.reason})" for r in rows if not r.ready]
    if ready_on:
        status, reason = ConditionStatus.TRUE, ImageReason.RECONCILED
        msg = f"ready on {', '.join(ready_on)}"
        if missing:
            msg += f"; not ready on {', '.join(missing)}"
    elif rows:
        status, reason = ConditionStatus.FALSE, rows[0].reason or ImageReason.LOOKUP_FAILED
        msg = f"not ready on any Provider: {', '.join(missing)}"
    else:
        status, reason = ConditionStatus.FALSE, NO_MATCHING_PROVIDER
        msg = (
            f"no Provider of class {PROVIDER_CLASS_VSPHERE!r} exists"
            if source_ref(img) is not None
            else f"spec.sources has no entry for provider class {PROVIDER_CLASS_VSPHERE!r}"
        )
    conds = set_condition(current.conditions, READY, status, reason, _cut(msg), gen, snap.now)
    desired = VMImageStatus(per_provider=rows, conditions=conds, observed_generation=gen)
    write = desired.to_wire() != current.to_wire()
    events: tuple[tuple[Literal["Normal", "Warning"], str, str], ...] = ()
    old_ready = get_condition(current.conditions, READY)
    if old_ready is None or old_ready.status != status or old_ready.reason != reason:
        events = (("Normal" if status is ConditionStatus.TRUE else "Warning", reason, _cut(msg)),)
    return Plan(status=desired, write_status=write, events=events)

