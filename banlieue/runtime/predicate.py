"""Predicates: which events matter to a controller (controller-runtime ``pkg/predicate``).

A ``Predicate`` answers, per event kind, whether the event should reach the queue. Every method
defaults to True. The built-in change predicates filter only updates (create, delete and generic
pass), and resync updates (old == new) are filtered out by the generation and resourceVersion
predicates (``cr:pkg/predicate/predicate.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from banlieue.runtime.event import Object

WATCH_FILTER_LABEL = "cluster.x-k8s.io/watch-filter"
"""CAPI's label for ``--watch-filter``: only objects whose label equals the value are watched."""


def _metadata(obj: Object) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class Predicate:
    """Filters events before they are enqueued (cr ``predicate.Funcs``: all True by default).

    Subclass and override the methods that filter; each takes the event's object(s).
    """

    def create(self, obj: Object) -> bool:
        """An object was added (or listed initially)."""
        return True

    def update(self, old: Object, new: Object) -> bool:
        """An object changed from ``old`` to ``new`` (same resourceVersion on resync)."""
        return True

    def delete(self, obj: Object) -> bool:
        """An object was deleted (tombstones are already unwrapped)."""
        return True

    def generic(self, obj: Object) -> bool:
        """A non-watch event (channel sources: backend notifications, timers)."""
        return True


class Funcs(Predicate):
    """A predicate from optional functions; a missing function means True (cr ``Funcs``)."""

    def __init__(
        self,
        *,
        create: Callable[[Object], bool] | None = None,
        update: Callable[[Object, Object], bool] | None = None,
        delete: Callable[[Object], bool] | None = None,
        generic: Callable[[Object], bool] | None = None,
    ) -> None:
        self._create, self._update, self._delete, self._generic = create, update, delete, generic

    def create(self, obj: Object) -> bool:
        return self._create is None or self._create(obj)

    def update(self, old: Object, new: Object) -> bool:
        return self._update is None or self._update(old, new)

    def delete(self, obj: Object) -> bool:
        return self._delete is None or self._delete(obj)

    def generic(self, obj: Object) -> bool:
        return self._generic is None or self._generic(obj)


def new_predicate_funcs(fn: Callable[[Object], bool]) -> Predicate:
    """A predicate applying ``fn`` to the event object of every kind; for updates to the new
    object (cr ``NewPredicateFuncs``)."""
    return Funcs(create=fn, update=lambda _old, new: fn(new), delete=fn, generic=fn)


class ResourceVersionChangedPredicate(Predicate):
    """Passes updates whose ``metadata.resourceVersion`` changed (drops resyncs)."""

    def update(self, old: Object, new: Object) -> bool:
        return _metadata(old).get("resourceVersion") != _metadata(new).get("resourceVersion")


class GenerationChangedPredicate(Predicate):
    """Passes updates whose ``metadata.generation`` changed: spec changes, not status-only or
    metadata-only writes. Caveat (cr): a status wiped externally is not self-corrected."""

    def update(self, old: Object, new: Object) -> bool:
        return _metadata(old).get("generation") != _metadata(new).get("generation")


class LabelChangedPredicate(Predicate):
    """Passes updates whose ``metadata.labels`` differ (missing and empty are equal)."""

    def update(self, old: Object, new: Object) -> bool:
        return dict(_metadata(old).get("labels") or {}) != dict(_metadata(new).get("labels") or {})


class AnnotationChangedPredicate(Predicate):
    """Passes updates whose ``metadata.annotations`` differ (missing and empty are equal)."""

    def update(self, old: Object, new: Object) -> bool:
        old_ann = dict(_metadata(old).get("annotations") or {})
        return old_ann != dict(_metadata(new).get("annotations") or {})


class _And(Predicate):
    def __init__(self, predicates: Sequence[Predicate]) -> None:
        self.predicates = tuple(predicates)

    def create(self, obj: Object) -> bool:
        return all(p.create(obj) for p in self.predicates)

    def update(self, old: Object, new: Object) -> bool:
        return all(p.update(old, new) for p in self.predicates)

    def delete(self, obj: Object) -> bool:
        return all(p.delete(obj) for p in self.predicates)

    def generic(self, obj: Object) -> bool:
        return all(p.generic(obj) for p in self.predicates)


class _Or(_And):
    def create(self, obj: Object) -> bool:
        return any(p.create(obj) for p in self.predicates)

    def update(self, old: Object, new: Object) -> bool:
        return any(p.update(old, new) for p in self.predicates)

    def delete(self, obj: Object) -> bool:
        return any(p.delete(obj) for p in self.predicates)

    def generic(self, obj: Object) -> bool:
        return any(p.generic(obj) for p in self.predicates)


class _Not(Predicate):
    def __init__(self, predicate: Predicate) -> None:
        self.predicate = predicate

    def create(self, obj: Object) -> bool:
        return not self.predicate.create(obj)

    def update(self, old: Object, new: Object) -> bool:
        return not self.predicate.update(old, new)

    def delete(self, obj: Object) -> bool:
        return not self.predicate.delete(obj)

    def generic(self, obj: Object) -> bool:
        return not self.predicate.generic(obj)


def and_(*predicates: Predicate) -> Predicate:
    """Passes when every predicate passes (True for none) (cr ``And``)."""
    return _And(predicates)


def or_(*predicates: Predicate) -> Predicate:
    """Passes when any predicate passes (False for none) (cr ``Or``)."""
    return _Or(predicates)


def not_(predicate: Predicate) -> Predicate:
    """Inverts every answer of ``predicate`` (cr ``Not``)."""
    return _Not(predicate)


def label_selector_predicate(match_labels: Mapping[str, str]) -> Predicate:
    """Passes objects whose labels contain every ``match_labels`` key with the same value (a
    ``matchLabels`` selector; for updates the new object counts) (cr ``LabelSelectorPredicate``).
    An empty selector passes everything."""
    wanted = dict(match_labels)

    def matches(obj: Object) -> bool:
        labels = _metadata(obj).get("labels") or {}
        return all(labels.get(k) == v for k, v in wanted.items())

    return new_predicate_funcs(matches)


def watch_filter_predicate(watch_filter_value: str) -> Predicate:
    """CAPI ``--watch-filter`` (``predicates.ResourceHasFilterLabel``): with an empty value every
    object passes; otherwise only objects labelled ``cluster.x-k8s.io/watch-filter=<value>``."""
    if not watch_filter_value:
        return Predicate()
    return label_selector_predicate({WATCH_FILTER_LABEL: watch_filter_value})
