"""The resource registry: which group/version/plural the double serves and how.

A :class:`ResourceType` is what discovery lists as an ``APIResource`` (name, singularName,
namespaced, kind, verbs, shortNames, categories) plus what the handlers need: the OpenAPI v3
schema (for CRDs), printer columns, whether ``/status`` is a subresource, whether strategic merge
patch is accepted (builtin kinds only). Objects are stored per *group resource* (group + plural)
so every served version of a CRD shares one store, as in kube-apiserver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class ResourceType:
    """One served resource at one group/version (``APIResource`` in discovery)."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(ALL_VERBS))
    status_subresource: bool = False
    scale_subresource: JSON | None = None
    schema: JSON | None = None
    printer_columns: list[JSON] | None = None
    builtin: bool = True
    # Whether metadata.generation is maintained (CRs and CRDs; not configmaps/secrets/...).
    has_generation: bool = False
    # Whether an immediate delete answers with the object (namespaces, CRDs) or a Status Success
    # (custom resources and most builtins; kube-apiserver v1.34.4, tests/envtest/test_differential.py).
    returns_deleted_object: bool = False
    # Whether PUT without metadata.resourceVersion is accepted (builtins) or 422 (CRs).
    unconditional_update: bool = True
    # Known top-level fields for builtins (for fieldValidation of unknown fields).
    top_level_fields: frozenset[str] = frozenset()
    # Whether status is reset on create (status subresource strategies).
    served: bool = True
    storage: bool = True
    crd_name: str | None = None
    # CRD selectableFields (jsonPath like ".spec.color"): extra field selector labels.
    selectable_fields: list[str] = field(default_factory=list)
    # Storage shared with another API (events.k8s.io/v1 events live with core/v1 events).
    storage_group_resource: tuple[str, str] | None = None

    @property
    def api_version(self) -> str:
        """``group/version`` or ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> tuple[str, str]:
        """The storage key: (group, plural), or the shared storage of another API."""
        return self.storage_group_resource or (self.group, self.plural)

    def list_kind(self) -> str:
        """``<Kind>List``."""
        return self.kind + "List"


class Registry:
    """Served resource types, indexed by (group, version, plural) and by group/version."""

    def __init__(self) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}

    def add(self, rt: ResourceType) -> None:
        """Register (or replace) ``rt`` at its group/version/plural."""
        self._by_gvr[(rt.group, rt.version, rt.plural)] = rt

    def remove_group_resource(self, group: str, plural: str) -> None:
        """Stop serving every version of ``plural.group`` (CRD deleted or changed)."""
        for key in [k for k in self._by_gvr if k[0] == group and k[2] == plural]:
            del self._by_gvr[key]

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The served type or None."""
        return self._by_gvr.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        """Every served type."""
        return list(self._by_gvr.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions served (core group is ``""``), preferred version first.

        Preference follows kube's version priority: GA > beta > alpha, higher number first.
        """
        out: dict[str, set[str]] = {}
        for g, v, _ in self._by_gvr:
            out.setdefault(g, set()).add(v)
        return {g: sorted(vs, key=version_priority_key) for g, vs in out.items()}

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        """Resources served at ``group/version``, sorted by plural."""
        return sorted(
            (rt for (g, v, _), rt in self._by_gvr.items() if g == group and v == version),
            key=lambda r: r.plural,
        )

    def for_group_resource(self, group: str, plural: str) -> ResourceType | None:
        """The storage-version type of ``plural.group`` (any served version if none is storage)."""
        found = [rt for (g, _, p), rt in self._by_gvr.items() if g == group and p == plural
                 and rt.storage_group_resource is None]
        for rt in found:
            if rt.storage:
                return rt
        return found[0] if found else None

    def by_kind(self, group: str, kind: str) -> list[ResourceType]:
        """Types of ``kind`` in ``group`` (any version)."""
        return [rt for (g, _, _), rt in self._by_gvr.items() if g == group and rt.kind == kind]


def version_priority_key(v: str) -> tuple[int, int, int, str]:
    """Sort key implementing kube's version priority (``v1`` > ``v1beta2`` > ``v1alpha1`` > ``foo``).

    Source: apiextensions "Version priority" (CustomResourceDefinition versioning docs).
    """
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (3, 0, 0, v)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, v)
