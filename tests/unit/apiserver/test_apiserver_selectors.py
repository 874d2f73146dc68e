"""Label and field selectors: apimachinery labels.Parse / fields.ParseSelector rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from banlieue.testing.apiserver.selectors import (
    parse_field_selector,
    parse_label_selector,
    selector_from_label_selector_dict,
)

LABEL_CASES = [
    # (rule id, selector, labels, expected)
    ("empty-matches-all", "", {"a": "b"}, True),
    ("empty-matches-none-labels", "", None, True),
    ("eq-match", "a=b", {"a": "b"}, True),
    ("eq-mismatch", "a=b", {"a": "c"}, False),
    ("eq-missing-key", "a=b", {}, False),
    ("double-eq", "a==b", {"a": "b"}, True),
    ("neq-different", "a!=b", {"a": "c"}, True),
    ("neq-same", "a!=b", {"a": "b"}, False),
    ("neq-missing-key-matches", "a!=b", {}, True),
    ("in-member", "env in (prod, dev)", {"env": "dev"}, True),
    ("in-nonmember", "env in (prod,dev)", {"env": "qa"}, False),
    ("in-missing-key", "env in (prod)", {}, False),
    ("notin-member", "env notin (prod)", {"env": "prod"}, False),
    ("notin-missing-key-matches", "env notin (prod)", {}, True),
    ("exists", "a", {"a": ""}, True),
    ("exists-missing", "a", {"b": "x"}, False),
    ("not-exists", "!a", {"b": "x"}, True),
    ("not-exists-present", "!a", {"a": "x"}, False),
    ("comma-is-and", "a=b,c", {"a": "b"}, False),
    ("comma-is-and-all", "a=b,c,!d", {"a": "b", "c": "1"}, True),
    ("eq-empty-value", "a=", {"a": ""}, True),
    ("prefixed-key", "example.com/tier=web", {"example.com/tier": "web"}, True),
    ("gt", "n>3", {"n": "4"}, True),
    ("lt-false", "n<3", {"n": "4"}, False),
    ("gt-non-integer-label", "n>3", {"n": "x"}, False),
    ("whitespace", "  a = b ,  c  ", {"a": "b", "c": ""}, True),
]


@pytest.mark.parametrize(("sel", "labels", "want"), [c[1:] for c in LABEL_CASES], ids=[c[0] for c in LABEL_CASES])
def test_label_selector_matches(sel: str, labels: dict[str, str] | None, want: bool) -> None:
    assert parse_label_selector(sel).matches(labels) is want


BAD_LABELS = [
    ("trailing-comma", "a=b,"),
    ("double-op", "a=b=c"),
    ("missing-key", "=b"),
    ("in-needs-paren", "a in b"),
    ("in-empty-set", "a in ()"),
    ("unclosed-set", "a in (b"),
    ("bad-key-chars", "a$b=c"),
    ("bad-value", "a=-b"),
    ("long-value", "a=" + "x" * 64),
    ("long-name", "x" * 64),
    ("bad-prefix", "Foo.com/a=b"),
    ("gt-non-int", "a>b"),
    ("not-exists-with-value", "!a=b"),
]


@pytest.mark.parametrize("sel", [c[1] for c in BAD_LABELS], ids=[c[0] for c in BAD_LABELS])
def test_label_selector_rejects(sel: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(sel)


@pytest.mark.parametrize("sel", ["in", "0=0,in", "notin", "in=x"])
def test_keyword_where_a_key_is_expected_is_a_syntax_error(sel: str) -> None:
    with pytest.raises(ValueError):
        parse_label_selector(sel)


def test_label_error_message_names_value() -> None:
    with pytest.raises(ValueError, match=r'Invalid value: "-b"'):
        parse_label_selector("a=-b")


_name = st.from_regex(r"\A[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?\Z")
# kube's lexer reads "in" and "notin" as operators where a key is expected ("in" alone is a
# syntax error there), and as plain identifiers only where a value is expected.
_key = _name.filter(lambda k: k not in ("in", "notin"))


@st.composite
def _requirement(draw: st.DrawFn) -> str:
    key = draw(_key)
    kind = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!"]))
    if kind in ("in", "notin"):
        return f"{key} {kind} ({','.join(draw(st.lists(_name, min_size=1, max_size=3)))})"
    if kind == "exists":
        return key
    if kind == "!":
        return "!" + key
    return f"{key}{kind}{draw(_name)}"


@given(st.lists(_requirement(), max_size=4), st.dictionaries(_key, _name, max_size=4))
def test_label_selector_string_round_trip(reqs: list[str], labels: dict[str, str]) -> None:
    sel = parse_label_selector(",".join(reqs))
    again = parse_label_selector(str(sel))
    assert again == sel
    assert again.matches(labels) == sel.matches(labels)
    # AND semantics: the conjunction matches iff every single requirement does.
    assert sel.matches(labels) == all(parse_label_selector(r).matches(labels) for r in reqs)


DICT_CASES = [
    ("empty-dict-matches-all", {}, {"x": "y"}, True),
    ("match-labels", {"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True),
    ("match-labels-miss", {"matchLabels": {"a": "b"}}, {"a": "c"}, False),
    ("expr-in", {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}, {"a": "y"}, True),
    ("expr-notin-absent", {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}, {}, True),
    ("expr-exists", {"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ("expr-doesnotexist", {"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    (
        "labels-and-exprs-anded",
        {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]},
        {"a": "b"},
        False,
    ),
]


@pytest.mark.parametrize(("sel", "labels", "want"), [c[1:] for c in DICT_CASES], ids=[c[0] for c in DICT_CASES])
def test_label_selector_dict(sel: dict[str, object], labels: dict[str, str], want: bool) -> None:
    assert selector_from_label_selector_dict(sel).matches(labels) is want


@pytest.mark.parametrize(
    "sel",
    [
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
    ],
    ids=["in-needs-values", "exists-forbids-values", "unknown-operator"],
)
def test_label_selector_dict_rejects(sel: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        selector_from_label_selector_dict(sel)


OBJ = {"metadata": {"name": "vm-1", "namespace": "ns"}, "spec": {"nodeName": "a,b"}, "status": {"phase": "Running"}}

FIELD_CASES = [
    ("empty", "", True),
    ("name-eq", "metadata.name=vm-1", True),
    ("name-double-eq", "metadata.name==vm-1", True),
    ("name-neq", "metadata.name!=vm-1", False),
    ("namespace-and-name", "metadata.namespace=ns,metadata.name=vm-2", False),
    ("extra-field", "status.phase=Running", True),
    ("escaped-comma", r"spec.nodeName=a\,b", True),
    ("missing-field-is-empty", "spec.missing=", True),
]


def _extra() -> dict[str, object]:
    return {
        "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
        "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
        "spec.missing": lambda o: (o.get("spec") or {}).get("missing", ""),
    }


@pytest.mark.parametrize(("sel", "want"), [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_field_selector_matches(sel: str, want: bool) -> None:
    assert parse_field_selector(sel, _extra()).matches(OBJ) is want  # type: ignore[arg-type]


def test_field_selector_unknown_field() -> None:
    with pytest.raises(ValueError, match=r"^field label not supported: spec.foo$"):
        parse_field_selector("spec.foo=bar")


@pytest.mark.parametrize("sel", ["metadata.name", "metadata.name=a,bogus"], ids=["no-operator", "second-term-bad"])
def test_field_selector_syntax_error(sel: str) -> None:
    with pytest.raises(ValueError, match="invalid selector"):
        parse_field_selector(sel)
