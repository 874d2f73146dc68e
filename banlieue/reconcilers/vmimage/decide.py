"""VMImage reconciler, pure part: ``Snapshot`` -> ``decide`` -> ``Plan`` (SPEC §2 VMImage, issue 23).

Rules (SPEC §2; *decision* where it is silent):

- Tenant safety (issue 23, docs/security.md case 8): the VMImage is cluster-scoped and readable
  by every tenant, so its status carries **counts only** (``providers``, ``readyProviders``) and
  a Ready condition naming no Provider and quoting no error. The per-Provider row lives in the
  Provider's own namespaced status, ``Provider.status.images[]`` (``name`` = the VMImage), where
  only those who may read that namespace's Providers see it; the scheduler reads it there.
- A row exists on every Provider (all namespaces) of class ``vsphere`` for which
  ``spec.sources[]`` has a ``providerClass: vsphere`` entry (*decision*: the first such entry
  is used). Providers of other classes are not this role's and get no row; a Provider that is
  no longer a target (source removed, VMImage deleted) loses its row.
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
  ``TLSVerifyFailed`` of a CA bundle that is not valid PEM), ``LookupFailed`` (any other backend
  error). Messages of the failure rows are generic and point at the Provider's own conditions
  (issue 23 case 5: what answered on an endpoint is told in the manager's log only).
- ``Ready`` (*decision*): True (``Reconciled``) when the image is ready on at least one
  Provider (the scheduler places only on Providers where the row is ready); False when it is
  ready nowhere, with the most frequent row reason (ties: alphabetical) and the count of each
  reason in the message, or ``NoMatchingProvider`` when there is no row.
- Requeue after ``REFRESH_SECONDS`` (templates appear and vanish without notification), or
  ``MISSING_RECHECK_SECONDS`` while a row says ``TemplateNotFound``: a template put back (renamed,
  re-imported) lets the VMs waiting for it go within that time, not up to 5 minutes later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from banlieue.api.conditions import READY, get_condition, set_condition
from banlieue.api.meta import ConditionStatus
from banlieue.api.provider import Provider, ProviderImageStatus
from banlieue.api.vmimage import (
    ImageReason,
    VMImage,
    VMImageConditionReason,
    VMImageStatus,
)
from banlieue.backends.base import AuthFailed, TemplateInfo, TLSVerifyFailed, Transient
from banlieue.reconcilers.kinds import PROVIDER_CLASS_VSPHERE

REFRESH_SECONDS = 300.0
"""Periodic re-lookup of templates (seconds)."""
MISSING_RECHECK_SECONDS = 30.0
"""Re-lookup while a row says ``TemplateNotFound`` (seconds): one lookup per such Provider."""
NO_MATCHING_PROVIDER = VMImageConditionReason.NO_MATCHING_PROVIDER
CONNECT_REASONS = frozenset({AuthFailed.__name__, TLSVerifyFailed.__name__, Transient.__name__, "EndpointNotAllowed"})
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
    """``status``: the full desired status; ``write_status`` False when unchanged. ``rows``: the
    row each target Provider, keyed by (namespace, name), must carry in ``status.images``."""

    status: VMImageStatus
    write_status: bool
    rows: dict[tuple[str, str], ProviderImageStatus] = field(default_factory=dict)
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


CONNECT_MESSAGE = "the Provider's vCenter could not be reached or refused the login; see the Provider's Ready condition"
"""Row message of ``ConnectFailed`` (the manager's log has the detail; issue 23 case 5)."""
SECRET_MESSAGE = "the Provider's connection settings are not usable; see the Provider's Ready condition"
"""Row message of ``SecretUnavailable``."""


def row_for(image_name: str, target: Target, lookup: Lookup | None) -> ProviderImageStatus:
    """The ``status.images`` row of one target Provider (module docstring reasons)."""
    ref = target.ref
    if lookup is None:
        return ProviderImageStatus(name=image_name, reason=ImageReason.LOOKUP_FAILED, message="not looked up yet")
    if lookup.config_error is not None and lookup.config_error[0] == TLSVerifyFailed.reason:
        # A CA bundle that is not PEM: the Provider shows TLSVerifyFailed itself.
        return ProviderImageStatus(name=image_name, reason=ImageReason.CONNECT_FAILED, message=CONNECT_MESSAGE)
    if lookup.config_error is not None:
        return ProviderImageStatus(name=image_name, reason=ImageReason.SECRET_UNAVAILABLE, message=SECRET_MESSAGE)
    if lookup.backend_error is not None:
        err_reason = lookup.backend_error[0]
        if err_reason in CONNECT_REASONS:
            return ProviderImageStatus(name=image_name, reason=ImageReason.CONNECT_FAILED, message=CONNECT_MESSAGE)
        return ProviderImageStatus(
            name=image_name, reason=ImageReason.LOOKUP_FAILED,
            message=f"looking template {ref!r} up failed ({err_reason}); the manager's log has the detail",
        )
    hits = [(dc, t) for dc, t in lookup.found if t is not None]
    misses = sorted(dc or "any datacenter" for dc, t in lookup.found if t is None)
    if hits and not misses:
        if len(lookup.found) == 1:
            resolved = hits[0][1].moref if hits[0][1] is not None else None
        else:
            resolved = ",".join(sorted(f"{dc or (t.datacenter if t else '')}:{t.moref if t else ''}" for dc, t in hits))
        where = ", ".join(sorted({t.datacenter for _, t in hits if t is not None}))
        return ProviderImageStatus(
            name=image_name, ready=True, resolved_ref=resolved, reason=ImageReason.RECONCILED,
            message=f"template {ref!r} found in {where}",
        )
    if hits:
        found_in = ", ".join(sorted(dc or "?" for dc, _ in hits))
        msg = f"template {ref!r} found in {found_in} but missing in {', '.join(misses)}: VMs may be placed in any datacenter of the Provider"
    elif misses:
        msg = f"template {ref!r} not found in {', '.join(misses)}"
    else:
        msg = f"template {ref!r} not found: the Provider has no datacenter"
    return ProviderImageStatus(name=image_name, reason=ImageReason.TEMPLATE_NOT_FOUND, message=_cut(msg))


def merged_rows(
    current: Sequence[ProviderImageStatus] | None, row: ProviderImageStatus | None, image_name: str,
    existing_images: frozenset[str] | None = None,
) -> list[ProviderImageStatus] | None:
    """A Provider's ``status.images`` with ``image_name``'s row replaced by ``row`` (removed when
    None) and, when ``existing_images`` is given, the rows of VMImages that no longer exist
    dropped; sorted by name. None when that equals ``current``."""
    rows = {r.name: r for r in current or () if r.name != image_name}
    if existing_images is not None:
        rows = {n: r for n, r in rows.items() if n in existing_images}
    if row is not None:
        rows[image_name] = row
    out = [rows[n] for n in sorted(rows)]
    old = sorted(current or (), key=lambda r: r.name)
    return None if [r.to_wire() for r in out] == [r.to_wire() for r in old] else out


def decide(snap: Snapshot) -> Plan:
    """The Plan for ``snap`` (module docstring rules). Never raises."""
    img = snap.image
    gen = img.metadata.generation
    name = img.metadata.name or ""
    current = img.status or VMImageStatus()
    rows = {(t.namespace, t.name): row_for(name, t, snap.lookups.get((t.namespace, t.name)))
            for t in targets(img, snap.providers)}
    ready = sum(1 for r in rows.values() if r.ready)
    not_ready = Counter(r.reason or ImageReason.LOOKUP_FAILED for r in rows.values() if not r.ready)
    counts = ", ".join(f"{reason}: {n}" for reason, n in sorted(not_ready.items()))
    if ready:
        status, reason = ConditionStatus.TRUE, ImageReason.RECONCILED
        msg = f"ready on {ready} of {len(rows)} Providers"
        if not_ready:
            msg += f"; not ready on {sum(not_ready.values())} ({counts})"
    elif rows:
        status = ConditionStatus.FALSE
        reason = min(not_ready, key=lambda r: (-not_ready[r], r))
        msg = f"ready on none of {len(rows)} Providers ({counts}); each Provider's status.images says why"
    else:
        status, reason = ConditionStatus.FALSE, NO_MATCHING_PROVIDER
        msg = (
            f"no Provider of class {PROVIDER_CLASS_VSPHERE!r} exists"
            if source_ref(img) is not None
            else f"spec.sources has no entry for provider class {PROVIDER_CLASS_VSPHERE!r}"
        )
    conds = set_condition(current.conditions, READY, status, reason, _cut(msg), gen, snap.now)
    desired = VMImageStatus(providers=len(rows), ready_providers=ready, conditions=conds, observed_generation=gen)
    write = desired.to_wire() != current.to_wire()
    events: tuple[tuple[Literal["Normal", "Warning"], str, str], ...] = ()
    old_ready = get_condition(current.conditions, READY)
    if old_ready is None or old_ready.status != status or old_ready.reason != reason:
        events = (("Normal" if status is ConditionStatus.TRUE else "Warning", reason, _cut(msg)),)
    missing = any(r.reason == ImageReason.TEMPLATE_NOT_FOUND for r in rows.values())
    return Plan(status=desired, write_status=write, events=events, rows=rows,
                requeue_after=MISSING_RECHECK_SECONDS if missing else REFRESH_SECONDS)
