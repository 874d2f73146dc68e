"""SPEC §2 failure-domain name slug and label-value sanitising (banlieue.reconcilers.provider.slug)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.reconcilers.provider.slug import is_slug, label_value, slug, unique_slugs

RFC1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("vc1-DC0-DC0_C0", "vc1-dc0-dc0-c0", id="upper-case-ascii-lowered-underscore-dashed"),
        pytest.param("a  b", "a-b", id="run-of-spaces-one-dash"),
        pytest.param("a-_-/ b", "a-b", id="run-of-mixed-symbols-one-dash"),
        pytest.param("--a--", "a", id="trimmed-both-ends"),
        pytest.param("Zürich", "z-rich", id="non-ascii-letter-is-a-separator"),
        pytest.param("東京-dc", "dc", id="cjk-only-run-trimmed"),
        pytest.param("\u212a", "", id="kelvin-sign-is-not-ascii-k"),
        pytest.param("!!!", "", id="only-symbols-empty"),
        pytest.param("a" * 70, "a" * 63, id="cut-to-63"),
        pytest.param("a" * 62 + "-b", "a" * 62, id="trailing-dash-after-cut-trimmed"),
        pytest.param("a" * 62 + "  bcd", "a" * 62, id="run-at-cut-point-trimmed"),
        pytest.param("prov.1/dc 2/cl:3", "prov-1-dc-2-cl-3", id="dots-slashes-colons"),
    ],
)
def test_slug_rules(text: str, want: str) -> None:
    assert slug(text) == want


@given(st.text(max_size=200))
def test_slug_is_rfc1123_label_or_empty(text: str) -> None:
    out = slug(text)
    assert out == "" or RFC1123_LABEL.match(out)
    assert len(out) <= 63
    assert slug(out) == out  # idempotent


def test_unique_slugs_keeps_plain_names_without_collision() -> None:
    names = unique_slugs("vc1", [("DC0", "C0"), ("DC0", "C1"), ("DC1", "C0")])
    assert names == ["vc1-dc0-c0", "vc1-dc0-c1", "vc1-dc1-c0"]


def test_unique_slugs_suffixes_every_member_of_a_collision() -> None:
    names = unique_slugs("p", [("dc", "a b"), ("dc", "a-b"), ("dc", "c")])
    assert names[2] == "p-dc-c"
    assert names[0] != names[1]
    assert all(n.startswith("p-dc-a-b-") and len(n) == len("p-dc-a-b-") + 8 for n in names[:2])
    # order independent: the same pair gets the same name wherever it is listed
    assert unique_slugs("p", [("dc", "a-b"), ("dc", "a b")]) == [names[1], names[0]]


def test_unique_slugs_long_names_cut_then_suffixed_within_63() -> None:
    long_a, long_b = "x" * 80 + "a", "x" * 80 + "b"
    names = unique_slugs("prov", [("dc", long_a), ("dc", long_b)])
    assert names[0] != names[1]
    assert all(len(n) <= 63 and RFC1123_LABEL.match(n) for n in names)


def test_unique_slugs_empty_slug_gets_hash_name() -> None:
    (name,) = unique_slugs("", [("東京", "大阪")])
    assert name.startswith("fd-") and RFC1123_LABEL.match(name)


@given(st.text(max_size=30), st.lists(st.tuples(st.text(max_size=80), st.text(max_size=80)), max_size=8, unique=True))
def test_unique_slugs_are_valid_and_unique(provider: str, pairs: list[tuple[str, str]]) -> None:
    names = unique_slugs(provider, pairs)
    assert len(names) == len(pairs)
    assert all(is_slug(n) for n in names)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("DC0", "DC0", id="plain-ascii-case-kept"),
        pytest.param("DC0_C1.a", "DC0_C1.a", id="underscore-dot-kept"),
        pytest.param("my cluster", "my-cluster", id="space-to-dash"),
        pytest.param("_x_", "x", id="ends-trimmed-to-alphanumeric"),
        pytest.param("Zürich Ost", "Z-rich-Ost", id="non-ascii-to-dash"),
        pytest.param("…", "", id="nothing-valid-is-empty"),
        pytest.param("a" * 62 + "._b", "a" * 62, id="cut-then-trimmed"),
    ],
)
def test_label_value_rules(text: str, want: str) -> None:
    assert label_value(text) == want


@given(st.text(max_size=200))
def test_label_value_is_always_valid(text: str) -> None:
    out = label_value(text)
    assert len(out) <= 63 and LABEL_VALUE.match(out)
