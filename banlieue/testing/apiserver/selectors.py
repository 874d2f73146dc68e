"""Label and field selectors, parsed and matched like apimachinery.

Rules follow k8s.io/apimachinery/pkg/labels/selector.go (lexer, parser, ``Requirement``
semantics), pkg/fields/selector.go (``key=value``, ``key==value``, ``key!=value`` terms, ``\\``
escapes) and pkg/apis/meta/v1/helpers.go ``LabelSelectorAsSelector`` (matchLabels /
matchExpressions). Pure functions: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "parse_field_selector",
    "parse_label_selector",
    "selector_from_label_selector_dict",
]

# apimachinery util/validation: qualified names and label values.
_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def validate_label_key(key: str) -> list[str]:
    """Return kube's messages for an invalid qualified name (label key); empty list when valid.

    Source: apimachinery util/validation ``IsQualifiedName``: optional DNS-1123 subdomain prefix
    (at most 253 characters) and ``/``, then a name of at most 63 characters.
    """
    errs: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253:
            errs.append("prefix part must be no more than 253 characters")
        elif not _DNS1123_SUBDOMAIN_RE.match(prefix):
            errs.append(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character"
            )
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character with an optional DNS subdomain prefix and '/'"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    elif not _NAME_RE.match(name):
        errs.append(_NAME_MSG)
    return errs


def validate_label_value(value: str) -> list[str]:
    """Return kube's messages for an invalid label value (``IsValidLabelValue``); empty when valid."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if value and not _NAME_RE.match(value):
        errs.append(_VALUE_MSG)
    return errs


@dataclass(frozen=True)
class Requirement:
    """One label requirement: ``key``, operator and values.

    Operators are apimachinery ``selection.Operator`` spellings: ``=``, ``==``, ``!=``, ``in``,
    ``notin``, ``exists``, ``!`` (does not exist), ``gt``, ``lt``.
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Apply ``Requirement.Matches``: ``!=``/``notin``/``!`` match when the key is absent."""
        op = self.operator
        present = self.key in labels
        if op in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if op == "exists":
            return present
        if op == "!":
            return not present
        if op in ("gt", "lt"):
            if not present:
                return False
            try:
                have = int(labels[self.key])
                want = int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "gt" else have < want
        raise AssertionError(f"unknown operator {op}")  # pragma: no cover - constructor checks

    def __str__(self) -> str:
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return "!" + self.key
        if op in ("in", "notin"):
            return f"{self.key} {op} ({','.join(self.values)})"
        sym = {"gt": ">", "lt": "<"}.get(op, op)
        return f"{self.key}{sym}{self.values[0]}"


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """True when every requirement holds for ``labels`` (``None`` is no labels)."""
        lbls: Mapping[str, str] = labels or {}
        return all(r.matches(lbls) for r in self.requirements)

    def empty(self) -> bool:
        """True for the selector that matches everything."""
        return not self.requirements

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _new_requirement(key: str, op: str, values: list[str]) -> Requirement:
    """Validate like ``labels.NewRequirement``; raises ValueError with kube's wording."""
    errs = validate_label_key(key)
    if errs:
        raise ValueError(f'key: Invalid value: "{key}": {"; ".join(errs)}')
    if op in ("in", "notin"):
        if not values:
            raise ValueError("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty")
    elif op in ("=", "==", "!="):
        if len(values) != 1:
            raise ValueError("values: Invalid value: exact-match compatibility requires one single value")
    elif op in ("exists", "!"):
        if values:
            raise ValueError("values: Invalid value: values set must be empty for exists and does not exist")
    elif op in ("gt", "lt"):
        if len(values) != 1:
            raise ValueError("values: Required value: for 'Gt', 'Lt' operators, exactly one value is required")
        try:
            int(values[0])
        except ValueError:
            raise ValueError(
                f"values[0]: Invalid value: \"{values[0]}\": for 'Gt', 'Lt' operators, the value must be an integer"
            ) from None
    else:
        raise ValueError(f'operator: Unsupported value: "{op}"')
    for i, v in enumerate(values):
        verrs = validate_label_value(v)
        if verrs and op not in ("gt", "lt"):
            raise ValueError(f'values[{i}][{key}]: Invalid value: "{v}": {"; ".join(verrs)}')
    # Sorted set semantics like sets.String in apimachinery, so str() is canonical.
    return Requirement(key, op, tuple(sorted(set(values))))


# --- label selector lexer/parser (labels/selector.go) -------------------------------------------

_SPECIAL = set("=!(),<> \t\r\n")


def _lex(s: str) -> list[tuple[str, str]]:
    """Tokenise into (kind, text); kinds: id, op, lpar, rpar, comma, in, notin."""
    toks: list[tuple[str, str]] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r\n":
            i += 1
        elif c == "(":
            toks.append(("lpar", c))
            i += 1
        elif c == ")":
            toks.append(("rpar", c))
            i += 1
        elif c == ",":
            toks.append(("comma", c))
            i += 1
        elif c in "=!<>":
            j = i
            while j < n and s[j] in "=!<>":
                j += 1
            text = s[i:j]
            if text not in ("=", "==", "!=", "!", "<", ">"):
                raise ValueError(f"unable to parse requirement: found '{text}', expected: identifier")
            toks.append(("op", text))
            i = j
        else:
            j = i
            while j < n and s[j] not in _SPECIAL:
                j += 1
            text = s[i:j]
            kind = text if text in ("in", "notin") else "id"
            toks.append((kind, text))
            i = j
    return toks


class _LabelParser:
    def __init__(self, s: str) -> None:
        self.toks = _lex(s)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.pos] if self.pos < len(self.toks) else ("eos", "")

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.pos += 1
        return tok

    def parse(self) -> LabelSelector:
        reqs: list[Requirement] = []
        if self.peek()[0] == "eos":
            return LabelSelector()
        while True:
            reqs.append(self.requirement())
            kind, text = self.take()
            if kind == "eos":
                break
            if kind != "comma":
                raise ValueError(f"found '{text}', expected: ',' or 'end of string'")
            if self.peek()[0] == "eos":
                raise ValueError("found '', expected: identifier after ','")
        return LabelSelector(tuple(reqs))

    def requirement(self) -> Requirement:
        kind, text = self.take()
        if kind == "op" and text == "!":
            kind, key = self.take()
            if kind != "id":
                raise ValueError(f"unable to parse requirement: found '{key}', expected: identifier")
            nxt = self.peek()[0]
            if nxt not in ("comma", "eos"):
                raise ValueError(f"unable to parse requirement: found '{self.peek()[1]}', expected: ',' or 'end of string'")
            return _new_requirement(key, "!", [])
        if kind != "id":
            raise ValueError(f"unable to parse requirement: found '{text}', expected: identifier")
        key = text
        kind, text = self.peek()
        if kind in ("comma", "eos"):
            return _new_requirement(key, "exists", [])
        self.pos += 1
        if kind in ("in", "notin"):
            return _new_requirement(key, kind, self.value_set())
        if kind == "op" and text in ("=", "==", "!=", "<", ">"):
            op = {"<": "lt", ">": "gt"}.get(text, text)
            vkind, vtext = self.peek()
            if vkind in ("comma", "eos"):
                value = ""  # "a=" selects the empty value, as in kube
            elif vkind in ("id", "in", "notin"):
                self.pos += 1
                value = vtext
            else:
                raise ValueError(f"unable to parse requirement: found '{vtext}', expected: identifier")
            return _new_requirement(key, op, [value])
        raise ValueError(
            f"unable to parse requirement: found '{text}', expected: in, notin, =, ==, !=, gt, lt"
        )

    def value_set(self) -> list[str]:
        kind, text = self.take()
        if kind != "lpar":
            raise ValueError(f"unable to parse requirement: found '{text}', expected: '('")
        values: list[str] = []
        expect_value = True
        while True:
            kind, text = self.take()
            if kind == "rpar":
                if expect_value and values:
                    values.append("")  # "(a,)" includes the empty value
                return values
            if kind == "comma":
                if expect_value:
                    values.append("")
                expect_value = True
            elif kind in ("id", "in", "notin") and expect_value:
                values.append(text)
                expect_value = False
            else:
                raise ValueError(f"unable to parse requirement: found '{text}', expected: ',', ')' or identifier")


def parse_label_selector(s: str) -> LabelSelector:
    """Parse a ``labelSelector`` query string (``labels.Parse``).

    Syntax: comma-separated (AND) requirements ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
    ``k notin (a)``, ``k``, ``!k``, ``k>1``, ``k<1``. The empty string matches everything.
    Raises ValueError with apimachinery-like wording on syntax or validation errors.
    """
    return _LabelParser(s).parse()


_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_from_label_selector_dict(sel: Mapping[str, Any]) -> LabelSelector:
    """Convert a metav1.LabelSelector dict (``LabelSelectorAsSelector``).

    ``matchLabels`` become ``=`` requirements, ``matchExpressions`` use In/NotIn/Exists/
    DoesNotExist. ``{}`` matches everything. Raises ValueError on an unknown operator or wrong
    value count (``"<op>" is not a valid label selector operator``).
    """
    reqs: list[Requirement] = []
    for k, v in sorted((sel.get("matchLabels") or {}).items()):
        reqs.append(_new_requirement(k, "=", [v]))
    for expr in sel.get("matchExpressions") or []:
        op = expr.get("operator")
        if op not in _EXPR_OPS:
            raise ValueError(f'"{op}" is not a valid label selector operator')
        reqs.append(_new_requirement(expr.get("key", ""), _EXPR_OPS[op], list(expr.get("values") or [])))
    return LabelSelector(tuple(reqs))


# --- field selectors (fields/selector.go) -------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    """One field term: ``field`` ``op`` (``=``, ``==`` or ``!=``) ``value``."""

    field: str
    operator: str
    value: str


_BUILTIN_FIELDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "metadata.name": lambda o: str((o.get("metadata") or {}).get("name") or ""),
    "metadata.namespace": lambda o: str((o.get("metadata") or {}).get("namespace") or ""),
}


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field terms with the getters that read each field from an object."""

    requirements: tuple[FieldRequirement, ...]
    getters: Mapping[str, Callable[[Mapping[str, Any]], str]]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """True when every term holds; a missing field reads as the empty string."""
        for r in self.requirements:
            have = self.getters[r.field](obj)
            if (have == r.value) != (r.operator != "!="):
                return False
        return True

    def empty(self) -> bool:
        """True for the selector that matches everything."""
        return not self.requirements


def _split_unescaped(s: str, sep: str) -> list[str]:
    parts, cur, i = [], [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            cur.append(s[i : i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if i + 1 >= len(s) or s[i + 1] not in "\\,=":
                raise ValueError(f"invalid field selector: invalid escape sequence in {s!r}")
            out.append(s[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _find_op(term: str) -> tuple[int, str] | None:
    """Index and spelling of the first unescaped ``!=``, ``==`` or ``=`` in ``term``."""
    i = 0
    while i < len(term):
        c = term[i]
        if c == "\\":
            i += 2
            continue
        if term.startswith("!=", i):
            return i, "!="
        if term.startswith("==", i):
            return i, "=="
        if c == "=":
            return i, "="
        i += 1
    return None


def parse_field_selector(
    s: str, extra_fields: Mapping[str, Callable[[dict[str, Any]], str]] | None = None
) -> FieldSelector:
    """Parse a ``fieldSelector`` query string (``fields.ParseSelector``).

    Terms are comma-separated ``field=value``, ``field==value`` or ``field!=value``; ``\\``
    escapes ``,``, ``=`` and ``\\`` in values. Supported fields: ``metadata.name``,
    ``metadata.namespace`` and the keys of ``extra_fields`` (getter: object -> string).
    Raises ValueError: ``invalid selector: ...`` on syntax, ``field label not supported: <f>`` on
    an unknown field.
    """
    getters: dict[str, Callable[[Mapping[str, Any]], str]] = dict(_BUILTIN_FIELDS)
    for k, g in (extra_fields or {}).items():
        getters[k] = g  # type: ignore[assignment]
    reqs: list[FieldRequirement] = []
    if s.strip() == "":
        return FieldSelector((), getters)
    for term in _split_unescaped(s, ","):
        found = _find_op(term)
        if found is None:
            raise ValueError(f"invalid selector: '{s}'; can't understand '{term}'")
        idx, op = found
        field = term[:idx].strip()
        value = _unescape(term[idx + len(op) :])
        if field not in getters:
            raise ValueError(f"field label not supported: {field}")
        reqs.append(FieldRequirement(field, op, value))
    return FieldSelector(tuple(reqs), getters)
