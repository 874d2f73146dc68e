"""Shared API shapes (metav1 and CAPI v1beta2) and the base model every banlieue type derives from.

Wire names are camelCase (Kubernetes API conventions); Python attributes are snake_case. Names that
camelCase cannot derive (``memoryMiB``, ``providerID``, ``insecureSkipTLSVerify``...) carry an
explicit alias. Objects are read as the API server returns them: unknown fields are ignored
(the server prunes them anyway), and ``status`` is optional everywhere.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API shape: camelCase aliases, population by name or alias, unknown fields ignored.

    ``to_wire()`` gives the JSON-ready dict the API server expects (aliases, no ``None``);
    ``from_wire(raw)`` parses such a dict (e.g. an object from a watch event).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        use_attribute_docstrings=True,
        validate_assignment=False,
    )

    def to_wire(self) -> dict[str, Any]:
        """Dump for the wire: camelCase keys, ``None`` left out, times as RFC 3339 (second precision)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_wire(cls, raw: dict[str, Any]) -> Self:
        """Parse a wire dict (camelCase); raises ``pydantic.ValidationError`` on a bad shape."""
        return cls.model_validate(raw)


def _format_time(value: datetime) -> str:
    # metav1.Time marshals as RFC 3339 with second precision in UTC; matching it keeps
    # "writes that change nothing" detectable by plain dict comparison.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, PlainSerializer(_format_time, return_type=str, when_used="json")]
"""metav1.Time: a timezone-aware datetime on the Python side, ``2026-01-02T03:04:05Z`` on the wire."""

_QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": _QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""resource.Quantity (``4``, ``"8Gi"``): int-or-string with the apimachinery quantity pattern."""

# Markers read by crdgen (banlieue.api.crdgen); kept here so models and schema stay in one place.


def list_map(*keys: str) -> dict[str, Any]:
    """``json_schema_extra`` for a list merged by key under server-side apply (``+listType=map``)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


LIST_ATOMIC: dict[str, Any] = {"x-kubernetes-list-type": "atomic"}
LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}
IMMUTABLE: dict[str, Any] = {
    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "field is immutable"}]
}


IP_PREFIX_MAX_LENGTH = 49
"""Longest IP address with prefix in text form (``ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128``
is 49 characters); bounds the CEL cost of ``isCIDR``."""

IPAddress = Annotated[
    str,
    Field(
        min_length=1,
        max_length=IP_PREFIX_MAX_LENGTH,
        json_schema_extra={"x-kubernetes-validations": [{"rule": "isIP(self)", "message": "must be an IP address (10.0.0.1, fd00::1)"}]},
    ),
]
"""An IPv4 or IPv6 address (CEL ``isIP``, Kubernetes 1.31+: no prefix, no zone, no IPv4-mapped IPv6)."""

def _ip_kind(ip: str) -> str:
    """CEL: what the Kubernetes CEL ``ip`` value expression ``ip`` is, when not a unicast address,
    for a message (the IP library has no multicast test: what remains is multicast or
    255.255.255.255)."""
    return (f"({ip}.isUnspecified() ? 'the unspecified address' : {ip}.isLoopback() ? 'a loopback address' : "
            f"{ip}.isLinkLocalUnicast() ? 'a link-local address (the guest configures those itself)' : "
            "'a multicast or broadcast address')")


_IPV4_BLOCK = "[" + ", ".join(str(2 ** (32 - p)) for p in range(33)) + "]"
"""CEL list: the number of IPv4 addresses in a network of prefix length ``p``, at index ``p``."""


def _ipv4_int(dotted: str) -> str:
    """CEL: the dotted-quad string expression ``dotted`` as an int (the IP library has no arithmetic)."""
    octet = f"{dotted}.split('.')"
    return (f"(int({octet}[0]) * 16777216 + int({octet}[1]) * 65536 + int({octet}[2]) * 256 + "
            f"int({octet}[3]))")


_BLOCK = f"{_IPV4_BLOCK}[cidr(self).prefixLength()]"
_SELF_ADDRESS = "self.split('/')[0]"
_HOST_OFFSET = f"({_ipv4_int(_SELF_ADDRESS)} % {_BLOCK})"

HOST_PREFIX_RULES: list[JsonValue] = [
    {"rule": "isCIDR(self)", "message": "must be an IP address with a prefix length (10.0.0.5/24, fd00::5/64)"},
    {"rule": "!isCIDR(self) || cidr(self).ip().isGlobalUnicast()",
     "message": "must be a unicast host address: not unspecified (0.0.0.0, ::), loopback (127.0.0.0/8, ::1), "
                "link-local (169.254.0.0/16, fe80::/10), multicast (224.0.0.0/4, ff00::/8) nor 255.255.255.255",
     "messageExpression": f"self + ' is ' + {_ip_kind('cidr(self).ip()')} + ': must be a unicast host address "
                          "(not unspecified, loopback, link-local nor multicast)'"},
    {"rule": f"!isCIDR(self) || self.contains(':') || cidr(self).prefixLength() > 30 || "
             f"({_HOST_OFFSET} != 0 && {_HOST_OFFSET} != {_BLOCK} - 1)",
     "message": "must not be the network or broadcast address of its network (/31 and /32 networks have neither): "
                "use a host address between the two",
     "messageExpression": f"self + ' is the ' + ({_HOST_OFFSET} == 0 ? 'network' : 'broadcast') + ' address of its network: "
                          "no host may use it; use an address between the network and broadcast addresses (/31 and "
                          "/32 networks have neither)'"},
]
"""CEL rules of an interface's address with its prefix length (Kubernetes 1.31+ IP/CIDR library;
``split`` from the CEL strings extension). The address must be a unicast address a host may
hold: not unspecified (RFC 4291 2.5.2, RFC 1122 3.2.1.3), loopback, multicast, the limited
broadcast, nor link-local (169.254/16 "SHOULD NOT be configured manually", RFC 3927 1.6; IPv6
link-local addresses are formed by the guest itself, RFC 4862 5.3) (Go ``netip.Addr.IsGlobalUnicast``,
which the library calls); an IPv4 address on a network of prefix length /30 or shorter is
neither the network nor the broadcast address (RFC 919, RFC 1122 3.2.1.3; RFC 3021 leaves /31
without either, /32 is one host)."""


def _gateway_rules(family: int) -> list[JsonValue]:
    """CEL rules of a default gateway of IP ``family`` (4 or 6): an address of that family
    (``isIP``, ``:`` only in IPv6), unicast (as ``HOST_PREFIX_RULES``); an IPv6 gateway may be
    link-local, as router advertisements announce it (RFC 4861 4.2)."""
    v4 = family == 4
    usable = "ip(self).isGlobalUnicast()" if v4 else "ip(self).isGlobalUnicast() || ip(self).isLinkLocalUnicast()"
    return [
        {"rule": "isIP(self) && !self.contains(':')" if v4 else "isIP(self) && self.contains(':')",
         "message": "must be an IPv4 address (10.0.0.1)" if v4 else "must be an IPv6 address (fd00::1)"},
        {"rule": f"!isIP(self) || {usable}",
         "message": "must be a unicast address: not unspecified, loopback, link-local nor multicast"
                    if v4 else "must be a unicast address: not unspecified, loopback nor multicast",
         "messageExpression": f"self + ' is ' + {_ip_kind('ip(self)')} + ': must be a unicast address of the "
                              "interface\\'s network (the router the guest sends other traffic to)'"},
    ]


IPv4Gateway = Annotated[
    str, Field(min_length=1, max_length=IP_PREFIX_MAX_LENGTH, json_schema_extra={"x-kubernetes-validations": _gateway_rules(4)})
]
"""An interface's IPv4 default gateway: a unicast IPv4 address (``_gateway_rules``)."""

IPv6Gateway = Annotated[
    str, Field(min_length=1, max_length=IP_PREFIX_MAX_LENGTH, json_schema_extra={"x-kubernetes-validations": _gateway_rules(6)})
]
"""An interface's IPv6 default gateway: a unicast or link-local IPv6 address (``_gateway_rules``)."""

IPPrefix = Annotated[
    str,
    Field(min_length=1, max_length=IP_PREFIX_MAX_LENGTH, json_schema_extra={"x-kubernetes-validations": HOST_PREFIX_RULES}),
]
"""An interface address with its prefix length, ``10.0.0.5/24`` or ``fd00::5/64`` (CEL ``isCIDR``,
Kubernetes 1.31+: host bits may be set, a netmask is not a prefix length), a host's unicast
address (``HOST_PREFIX_RULES``)."""

UncheckedIPPrefix = Annotated[
    str, Field(json_schema_extra={"minLength": 1, "maxLength": IP_PREFIX_MAX_LENGTH, "x-kubernetes-validations": HOST_PREFIX_RULES})
]
"""``IPPrefix`` in the CRD schema only: banlieue reads any string (a VSphereMachine stored before
the rules existed is still read, ADR 0012)."""

UncheckedIPAddress = Annotated[
    str, Field(json_schema_extra={"minLength": 1, "maxLength": IP_PREFIX_MAX_LENGTH, "x-kubernetes-validations": [
        {"rule": "isIP(self)", "message": "must be an IP address (10.0.0.1, fd00::1)"}]})
]
"""``IPAddress`` in the CRD schema only."""

UncheckedIPv4Gateway = Annotated[
    str, Field(json_schema_extra={"minLength": 1, "maxLength": IP_PREFIX_MAX_LENGTH, "x-kubernetes-validations": _gateway_rules(4)})
]
"""``IPv4Gateway`` in the CRD schema only."""

UncheckedIPv6Gateway = Annotated[
    str, Field(json_schema_extra={"minLength": 1, "maxLength": IP_PREFIX_MAX_LENGTH, "x-kubernetes-validations": _gateway_rules(6)})
]
"""``IPv6Gateway`` in the CRD schema only."""


def interface_ip_rules(gateway_without_address: dict[int, str], where: str) -> list[JsonValue]:
    """CEL rules of one interface's ``addresses``/``gateway4``/``gateway6`` together (object level).

    - A gateway lies in one of the interface's networks of its family, when it has addresses of
      that family (an IPv6 gateway may be link-local, RFC 4861): the guest could not reach it
      otherwise.
    - A gateway is not one of the interface's own addresses, and an IPv4 gateway is not the
      network or broadcast address of the network it lies in (/30 or shorter, RFC 919, RFC 1122
      3.2.1.3): the guest cannot route through its own or a network's address.
    - ``gateway4`` needs IPv4 on the interface: an IPv4 address, or
      ``gateway_without_address[4]`` (a CEL condition: DHCPv4, or addresses decided elsewhere).

    ``where`` names, in messages, what else gives the interface IPv4."""
    rules: list[JsonValue] = []
    for family in (4, 6):
        gw = f"self.gateway{family}"
        of_family = "a.contains(':')" if family == 6 else "!a.contains(':')"
        link_local = f" || ip({gw}).isLinkLocalUnicast()" if family == 6 else ""
        rules.append({
            "rule": f"!has({gw}) || !isIP({gw}) || !has(self.addresses) || "
                    f"!self.addresses.exists(a, isCIDR(a) && {of_family}) || "
                    f"self.addresses.exists(a, isCIDR(a) && cidr(a).containsIP({gw})){link_local}",
            "fieldPath": f".gateway{family}",
            "message": f"gateway{family} is outside the interface's IPv{family} networks (those of its addresses): the "
                       "guest could not reach it; use a gateway inside one of them or an address in the gateway's network",
            "messageExpression": f"'gateway{family} ' + {gw} + \" is outside the interface's IPv{family} networks (those "
                                 "of its addresses): the guest could not reach it; use a gateway inside one of them or "
                                 "an address in the gateway's network\"",
        })
    # The gateway is the router's address: never the interface's own address, nor (IPv4, a
    # network of /30 or shorter) the network or broadcast address of the network it lies in.
    gw4 = "self.gateway4"
    block = f"{_IPV4_BLOCK}[cidr(a).prefixLength()]"
    offset = f"({_ipv4_int(gw4)} % {block})"
    rules.append({
        "rule": f"!has({gw4}) || !isIP({gw4}) || {gw4}.contains(':') || !has(self.addresses) || "
                f"!self.addresses.exists(a, isCIDR(a) && !a.contains(':') && cidr(a).containsIP({gw4}) && "
                f"(cidr(a.split('/')[0] + '/32').containsIP({gw4}) || "
                f"(cidr(a).prefixLength() <= 30 && ({offset} == 0 || {offset} == {block} - 1))))",
        "fieldPath": ".gateway4",
        "message": "gateway4 is the interface's own address, or the network or broadcast address of its network: the "
                   "guest cannot route through it; use the router's address",
        "messageExpression": f"'gateway4 ' + {gw4} + \" is the interface's own address, or the network or broadcast "
                             "address of its network: the guest cannot route through it; use the router's address\"",
    })
    rules.append({
        "rule": "!has(self.gateway6) || !isIP(self.gateway6) || !has(self.addresses) || "
                "!self.addresses.exists(a, isCIDR(a) && a.contains(':') && "
                "cidr(a.split('/')[0] + '/128').containsIP(self.gateway6))",
        "fieldPath": ".gateway6",
        "message": "gateway6 is the interface's own address: the guest cannot route through it; use the router's address",
        "messageExpression": "'gateway6 ' + self.gateway6 + \" is the interface's own address: the guest cannot route "
                             "through it; use the router's address\"",
    })
    without = gateway_without_address[4]
    rules.append({
        "rule": "!has(self.gateway4) || (has(self.addresses) && self.addresses.exists(a, !a.contains(':')))"
                + ("" if without == "false" else f" || {without}"),
        "fieldPath": ".gateway4",
        "message": f"gateway4 is set but the interface has no IPv4 address (no IPv4 in addresses{where}): add an "
                   "IPv4 address or remove gateway4",
    })
    return rules


def one_default_gateway_rules(items: str, has_gateway: str, max_items: int) -> list[JsonValue]:
    """CEL rules of a list of interfaces (``items``, a field of ``self``, at most ``max_items``
    long): at most one declares an IPv4 and one an IPv6 default gateway. ``has_gateway`` is the
    CEL condition that interface ``{i}`` declares one, with ``{family}`` for 4 or 6
    (``has({i}.gateway{family})``).

    Rule: a guest has one default route per family. Two interfaces declaring one give two default
    routes of the same metric: netplan reports them as conflicting and which one the kernel uses
    is not defined (the traffic may leave by the wrong network), so the user says which
    interface carries it. The message names the interfaces: one term per index, as a list built
    by ``filter`` has elements of unknown size, which the API server's CEL cost estimate refuses
    to concatenate."""
    rules: list[JsonValue] = []
    for family in (4, 6):
        has_gw = has_gateway.format(family=family, i="i")
        names = " + ".join(
            f"(size(self.{items}) > {k} && {has_gateway.format(family=family, i=f'self.{items}[{k}]')} ? "
            f"', ' + self.{items}[{k}].name : '')" for k in range(max_items))
        rules.append({
            "rule": f"!has(self.{items}) || self.{items}.filter(i, {has_gw}).size() <= 1",
            "fieldPath": f".{items}",
            "message": f"gateway{family} is set on more than one interface: a guest has one IPv{family} default "
                       f"route; keep gateway{family} on the interface that carries it and remove it from the others",
            "messageExpression": f"'gateway{family} is set on interfaces ' + ({names}).substring(2) + "
                                 f"': a guest has one IPv{family} default route (two make it undefined which one "
                                 f"is used); keep gateway{family} on the interface that carries it and remove it "
                                 "from the others'",
        })
    return rules


class ObjectMeta(ApiModel):
    """Standard object metadata (the subset banlieue reads; other metadata fields are ignored)."""

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: Time | None = None
    deletion_timestamp: Time | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[OwnerReference] | None = None


class OwnerReference(ApiModel):
    """metav1.OwnerReference: who owns this object (garbage collection, controller ownership)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class TemplateObjectMeta(ApiModel):
    """CAPI ObjectMeta for templates: labels and annotations copied onto the objects made from it."""

    labels: dict[str, str] | None = None
    """Labels propagated to the created object."""
    annotations: dict[str, str] | None = None
    """Annotations propagated to the created object."""


class LocalObjectReference(ApiModel):
    """A reference to an object by name, in the same namespace as the referrer."""

    name: str = Field(min_length=1, max_length=253)
    """Name of the referenced object."""


class LabelSelectorOperator(StrEnum):
    """metav1.LabelSelectorOperator."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


LABEL_SELECTOR_REQUIREMENT_RULES: list[JsonValue] = [
    {"rule": "!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
     "message": "operators In and NotIn need at least one value: list the values, or use Exists or DoesNotExist"},
    {"rule": "!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
     "message": "operators Exists and DoesNotExist take no values: remove values, or use In or NotIn"},
]
"""CEL rules of a label selector requirement, as kube-apiserver checks its own selectors
(apimachinery ``metav1validation.ValidateLabelSelectorRequirement``: In/NotIn need values,
Exists/DoesNotExist must have none). Without them an In without values matched nothing and an
Exists with values ignored them, silently (new-user finding)."""


class LabelSelectorRequirement(ApiModel):
    """metav1.LabelSelectorRequirement: ``key`` ``operator`` ``values``. In and NotIn need
    values, Exists and DoesNotExist take none, as in Kubernetes' own selectors; an unknown
    operator is refused."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": LABEL_SELECTOR_REQUIREMENT_RULES})

    key: str
    """The label key the selector applies to."""
    operator: LabelSelectorOperator
    """In, NotIn, Exists or DoesNotExist."""
    values: list[str] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Values for In/NotIn; must be empty for Exists/DoesNotExist."""


class LabelSelector(ApiModel):
    """metav1.LabelSelector: matchLabels and matchExpressions are ANDed; an empty selector matches everything."""

    match_labels: dict[str, str] | None = None
    """Map of {key: value} pairs; each is equivalent to an In requirement with one value."""
    match_expressions: list[LabelSelectorRequirement] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """List of label selector requirements."""

    def matches(self, labels: dict[str, str] | None) -> bool:
        """Whether ``labels`` satisfy this selector (apimachinery labels.SelectorFromSet semantics)."""
        have = labels or {}
        for key, value in (self.match_labels or {}).items():
            if have.get(key) != value:
                return False
        for req in self.match_expressions or []:
            present = req.key in have
            vals = req.values or []
            if req.operator is LabelSelectorOperator.IN and (not present or have[req.key] not in vals):
                return False
            if req.operator is LabelSelectorOperator.NOT_IN and present and have[req.key] in vals:
                return False
            if req.operator is LabelSelectorOperator.EXISTS and not present:
                return False
            if req.operator is LabelSelectorOperator.DOES_NOT_EXIST and present:
                return False
        return True

    def format(self) -> str:
        """The selector as kubectl and Kubernetes messages print it: ``app=web,tier in (a,b),!gone``.

        Rule: apimachinery ``metav1.FormatLabelSelector`` (requirements sorted by key, values
        sorted, ``<none>`` for a selector with no requirement, which matches everything).
        """
        parts: list[tuple[str, str]] = [(k, f"{k}={v}") for k, v in (self.match_labels or {}).items()]
        for req in self.match_expressions or []:
            values = ",".join(sorted(req.values or []))
            text = {
                LabelSelectorOperator.IN: f"{req.key} in ({values})",
                LabelSelectorOperator.NOT_IN: f"{req.key} notin ({values})",
                LabelSelectorOperator.EXISTS: req.key,
                LabelSelectorOperator.DOES_NOT_EXIST: f"!{req.key}",
            }[req.operator]
            parts.append((req.key, text))
        if not parts:
            return "<none>"
        return ",".join(text for _, text in sorted(parts))


class MachineAddressType(StrEnum):
    """CAPI MachineAddressType."""

    HOSTNAME = "Hostname"
    EXTERNAL_IP = "ExternalIP"
    INTERNAL_IP = "InternalIP"
    EXTERNAL_DNS = "ExternalDNS"
    INTERNAL_DNS = "InternalDNS"


class MachineAddress(ApiModel):
    """CAPI MachineAddress: one address of a machine."""

    type: MachineAddressType
    """Hostname, ExternalIP, InternalIP, ExternalDNS or InternalDNS."""
    address: str = Field(min_length=1, max_length=256)
    """The address (an IP or a DNS name)."""


class APIEndpoint(ApiModel):
    """CAPI APIEndpoint: where the control plane's API server is reachable."""

    host: str | None = Field(default=None, min_length=1, max_length=512)
    """The hostname or IP on which the API server is serving."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """The port on which the API server is serving."""


class ConditionStatus(StrEnum):
    """metav1.ConditionStatus."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """metav1.Condition: one aspect of the object's current state (upsert by ``type``)."""

    model_config = ConfigDict(
        json_schema_extra={"required": ["lastTransitionTime", "message", "reason", "status", "type"]}
    )

    type: str = Field(max_length=316, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")
    """Type of condition in CamelCase (Ready, Scheduled, ...)."""
    status: ConditionStatus
    """True, False or Unknown."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation the condition was set for."""
    last_transition_time: Time
    """Last time the condition changed from one status to another."""
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Programmatic identifier (CamelCase) of the reason for the last transition."""
    message: str = Field(default="", max_length=32768)
    """Human-readable message about the transition; may be empty."""


class FailureDomain(ApiModel):
    """CAPI v1beta2 FailureDomain: one place machines can be spread across."""

    name: str = Field(min_length=1, max_length=256)
    """Name of the failure domain (unique in the list)."""
    control_plane: bool | None = None
    """Whether control-plane machines may be placed in this failure domain."""
    attributes: dict[str, str] | None = None
    """Free-form attributes the infrastructure provider uses (banlieue: labels plus raw placement)."""


class Initialization(ApiModel):
    """CAPI v1beta2 ``status.initialization``: provisioning milestones read by CAPI core."""

    provisioned: bool | None = None
    """True once the infrastructure is provisioned (replaces the deprecated status.ready)."""


class ContractVersionedObjectReference(ApiModel):
    """CAPI v1beta2 reference by API group, kind and name (same namespace)."""

    api_group: str = Field(min_length=1, max_length=253)
    """API group of the referenced object (no version)."""
    kind: str = Field(min_length=1, max_length=63)
    """Kind of the referenced object."""
    name: str = Field(min_length=1, max_length=253)
    """Name of the referenced object."""


ObjectMeta.model_rebuild()


class ListMeta(ApiModel):
    """metav1.ListMeta: the list's resourceVersion and pagination token."""

    resource_version: str | None = None
    continue_: str | None = Field(default=None, alias="continue")
    remaining_item_count: int | None = None


class KubeObject(ApiModel):
    """Fields every top-level object has: apiVersion, kind, metadata.

    Subclasses set the defaults of ``api_version``/``kind`` and add ``spec``/``status``.
    """

    api_version: str
    """APIVersion defines the versioned schema of this representation of an object."""
    kind: str
    """Kind is a string value representing the REST resource this object represents."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""
