"""Predicates: cr pkg/predicate semantics (only updates filtered by the change predicates)."""

from __future__ import annotations

from typing import Any

import pytest

from banlieue.runtime.predicate import (
    WATCH_FILTER_LABEL,
    AnnotationChangedPredicate,
    Funcs,
    GenerationChangedPredicate,
    LabelChangedPredicate,
    Predicate,
    ResourceVersionChangedPredicate,
    and_,
    label_selector_predicate,
    new_predicate_funcs,
    not_,
    or_,
    watch_filter_predicate,
)


def obj(
    rv: str = "1", generation: int = 1, labels: dict[str, str] | None = None, annotations: Any = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "a", "namespace": "ns", "resourceVersion": rv, "generation": generation}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("predicate", "old", "new", "passes"),
    [
        (ResourceVersionChangedPredicate(), obj(rv="1"), obj(rv="2"), True),
        (ResourceVersionChangedPredicate(), obj(rv="1"), obj(rv="1"), False),
        (GenerationChangedPredicate(), obj(rv="1", generation=1), obj(rv="2", generation=2), True),
        (GenerationChangedPredicate(), obj(rv="1", generation=1), obj(rv="2", generation=1), False),
        (LabelChangedPredicate(), obj(labels={"a": "1"}), obj(labels={"a": "2"}), True),
        (LabelChangedPredicate(), obj(labels={"a": "1"}), obj(rv="2", labels={"a": "1"}), False),
        (LabelChangedPredicate(), obj(labels={}), obj(), False),
        (AnnotationChangedPredicate(), obj(annotations={"x": "1"}), obj(annotations={"x": "2"}), True),
        (AnnotationChangedPredicate(), obj(annotations={"x": "1"}), obj(annotations={"x": "1"}), False),
    ],
    ids=[
        "rv-changed",
        "rv-same-resync-dropped",
        "generation-changed",
        "status-only-write-dropped",
        "labels-changed",
        "labels-same",
        "labels-missing-equals-empty",
        "annotations-changed",
        "annotations-same",
    ],
)
def test_change_predicates_filter_updates(predicate: Predicate, old: Any, new: Any, passes: bool) -> None:
    assert predicate.update(old, new) is passes
    # Create, delete and generic always pass for the change predicates.
    assert predicate.create(new) and predicate.delete(new) and predicate.generic(new)


def test_funcs_missing_means_true() -> None:
    p = Funcs(create=lambda o: False)
    assert p.create(obj()) is False
    assert p.update(obj(), obj()) and p.delete(obj()) and p.generic(obj())


def test_new_predicate_funcs_uses_new_object_on_update() -> None:
    p = new_predicate_funcs(lambda o: o["metadata"]["resourceVersion"] == "2")
    assert p.update(obj(rv="1"), obj(rv="2"))
    assert not p.update(obj(rv="2"), obj(rv="1"))
    assert not p.create(obj(rv="1")) and p.delete(obj(rv="2")) and p.generic(obj(rv="2"))


def test_and_or_not() -> None:
    never = Funcs(
        create=lambda o: False, update=lambda o, n: False, delete=lambda o: False, generic=lambda o: False
    )
    always = Predicate()
    assert not and_(always, never).create(obj())
    assert and_(always, always).update(obj(), obj())
    assert and_().delete(obj())  # vacuous truth
    assert or_(never, always).generic(obj())
    assert not or_(never, never).create(obj())
    assert not or_().create(obj())
    assert not_(never).create(obj()) and not_(never).update(obj(), obj())
    assert not not_(always).delete(obj())
    # Composition with change predicates: a status-only write with a label change passes or_.
    either = or_(GenerationChangedPredicate(), LabelChangedPredicate())
    assert either.update(obj(labels={"a": "1"}), obj(rv="2", labels={"a": "2"}))
    assert not either.update(obj(labels={"a": "1"}), obj(rv="2", labels={"a": "1"}))


def test_label_selector_predicate() -> None:
    p = label_selector_predicate({"tier": "db", "env": "prod"})
    assert p.create(obj(labels={"tier": "db", "env": "prod", "x": "y"}))
    assert not p.create(obj(labels={"tier": "db"}))
    assert not p.delete(obj())
    assert p.update(obj(), obj(labels={"tier": "db", "env": "prod"}))  # the new object counts
    assert label_selector_predicate({}).create(obj())


def test_watch_filter_predicate() -> None:
    assert watch_filter_predicate("").create(obj())  # no filter: everything passes
    p = watch_filter_predicate("team-a")
    assert p.create(obj(labels={WATCH_FILTER_LABEL: "team-a"}))
    assert not p.create(obj(labels={WATCH_FILTER_LABEL: "team-b"}))
    assert not p.generic(obj())
