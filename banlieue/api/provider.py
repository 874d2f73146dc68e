"""Provider (banlieue.io/v1alpha1): one backend instance, one vCenter (SPEC §2)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field

from banlieue.api.groups import CORE_API_VERSION as API_VERSION
from banlieue.api.meta import (
    IMMUTABLE,
    LIST_SET,
    ApiModel,
    Condition,
    KubeObject,
    ListMeta,
    LocalObjectReference,
    Time,
    list_map,
)

_CONDITIONS = list_map("type")
_BY_NAME = list_map("name")

class ProviderConditionReason:
    """Reasons of the Provider ``Ready`` and ``ProviderReachable`` conditions (SPEC §2, plus
    ``UnsupportedProviderClass``: a provider class no running role serves). The VSphereMachine
    and VMImage reconcilers borrow the connection reasons. Operators: docs/operations.md."""

    RECONCILED = "Reconciled"
    SECRET_MISSING = "SecretMissing"
    SECRET_INVALID = "SecretInvalid"
    CONNECT_FAILED = "ConnectFailed"
    TLS_VERIFY_FAILED = "TLSVerifyFailed"
    INVENTORY_FAILED = "InventoryFailed"
    PAUSED = "Paused"
    UNSUPPORTED_PROVIDER_CLASS = "UnsupportedProviderClass"
    INSECURE_ENDPOINT = "InsecureEndpoint"
    """``spec.connection.endpoint`` is ``http://`` and the role runs without
    ``--development-allow-http-endpoints``: nothing is sent (docs/security.md)."""
    ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
    """Every address of ``spec.connection.endpoint`` must be in the role's
    ``--allowed-endpoint-cidrs``; this one is not, so no connection was attempted (issue 23)."""
    DELETING = "Deleting"
    """Deletion requested while VSphereMachines still use the Provider: its finalizer
    ``banlieue.io/provider`` holds it (and its failure domains) until they are gone."""
    VCENTER_IDENTITY_CHANGED = "VCenterIdentityChanged"
    """The endpoint reaches a vCenter whose instance UUID is not the recorded
    ``status.vcenter.instanceUUID`` while VSphereMachines use the Provider: nothing is placed,
    changed or destroyed through it until the endpoint reaches that vCenter again (ADR 0013)."""
    DUPLICATE_VCENTER = "DuplicateVCenter"
    """Another Provider reaches the same vCenter (same instance UUID): ``VCenterUnique`` False on
    each; ``Ready`` False on all but the oldest, which alone takes new VMs (ADR 0013)."""
    UNIQUE = "Unique"
    """``VCenterUnique`` True: no other Provider reaches this vCenter."""


PROVIDER_REACHABLE = "ProviderReachable"
VCENTER_UNIQUE = "VCenterUnique"
"""Provider condition: True (``Unique``) when no other Provider of the namespace reaches the same vCenter, False
(``DuplicateVCenter``) naming the others (ADR 0013)."""


class KeyReference(ApiModel):
    """A key of a ConfigMap or Secret in the Provider's namespace."""

    name: str = Field(min_length=1)
    """Name of the ConfigMap or Secret."""
    key: str = Field(default="ca.crt", min_length=1)
    """Key holding the PEM bundle."""


class CABundle(ApiModel):
    """PEM CA bundle used to verify the endpoint's TLS certificate; exactly one source is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.inline), has(self.configMapRef), has(self.secretRef)]"
                    ".filter(x, x).size() == 1",
                    "message": "exactly one of inline, configMapRef or secretRef must be set",
                }
            ]
        }
    )

    inline: str | None = Field(default=None, min_length=1)
    """PEM-encoded certificates, inline."""
    config_map_ref: KeyReference | None = None
    """A ConfigMap key holding the PEM bundle (key defaults to ca.crt)."""
    secret_ref: KeyReference | None = None
    """A Secret key holding the PEM bundle (key defaults to ca.crt)."""


_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
ENDPOINT_PATTERN = r"^([hH][tT][tT][pP][sS]?://)?([^\s/:?#@\[\]]+|\[[0-9A-Fa-f:.]+\])(:" + _PORT + r")?(/\S*)?$"
"""``spec.connection.endpoint``: ``[http[s]://]host[:port][/path]`` (scheme in any case), the host a name, an IPv4
address or a bracketed IPv6 address, the port 1-65535 (what ``backends.vsphere.session.parse_endpoint``
accepts; a port out of range raised there on every reconcile before the pattern said so)."""
ENDPOINT_MAX_LENGTH = 1024
"""Bound of ``spec.connection.endpoint`` (a URL; also bounds the CEL cost of its ``matches`` rule)."""
ENDPOINT_MESSAGE = ("must be a host name or IP address, optionally with a port (1-65535), or an https:// URL "
                    "(vcenter.example.com, 10.0.0.10:443, [fd00::10]:443, https://vcenter.example.com/sdk)")
"""What kubectl prints for an endpoint that does not match ``ENDPOINT_PATTERN``: a CEL rule with
this message rather than an OpenAPI ``pattern``, whose error quotes the raw regular expression
(new-user finding)."""


def _endpoint_form(value: str) -> str:
    """``ENDPOINT_PATTERN``, checked for API models as the CRD's CEL rule checks it at admission.
    Raises ValueError (``ENDPOINT_MESSAGE``)."""
    if re.search(ENDPOINT_PATTERN, value) is None:
        raise ValueError(f"endpoint {ENDPOINT_MESSAGE}")
    return value


Endpoint = Annotated[
    str,
    Field(min_length=1, max_length=ENDPOINT_MAX_LENGTH, json_schema_extra={"x-kubernetes-validations": [
        {"rule": f"self.matches(r'{ENDPOINT_PATTERN}')", "message": ENDPOINT_MESSAGE}]}),
    AfterValidator(_endpoint_form),
]


class ProviderConnection(ApiModel):
    """How to reach and authenticate to the backend (vCenter)."""

    endpoint: Endpoint
    """vCenter address: a host, host:port, or https URL (``/sdk`` is implied); refused at
    admission when it is none of these (another scheme, spaces), since the controller could only
    fail on it at every reconcile."""
    credentials_ref: LocalObjectReference
    """Secret in the Provider's namespace with keys ``username`` and ``password``."""
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecureSkipTLSVerify")
    """Skip TLS certificate verification (development only)."""
    ca_bundle: CABundle | None = None
    """CA bundle to verify the endpoint; the system trust store when absent."""


class StorageTarget(ApiModel):
    """The vSphere object a storage class maps to; exactly one is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.datastore) != has(self.datastoreCluster)",
                    "message": "exactly one of datastore or datastoreCluster must be set",
                }
            ]
        }
    )

    datastore: str | None = Field(default=None, min_length=1)
    """Datastore name."""
    datastore_cluster: str | None = Field(default=None, min_length=1)
    """Datastore cluster (storage pod) name."""


class StorageClassMapping(ApiModel):
    """An abstract storage class offered by this Provider."""

    name: str = Field(min_length=1)
    """Abstract storage class name used by VMClass disks."""
    target: StorageTarget
    """The datastore or datastore cluster it maps to."""


class NetworkTarget(ApiModel):
    """The vSphere network a network class maps to; exactly one is set."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.portGroup) != has(self.distributedPortGroup)",
                    "message": "exactly one of portGroup or distributedPortGroup must be set",
                }
            ]
        }
    )

    port_group: str | None = Field(default=None, min_length=1)
    """Standard port group name."""
    distributed_port_group: str | None = Field(default=None, min_length=1)
    """Distributed port group name."""


class NetworkClassMapping(ApiModel):
    """An abstract network class offered by this Provider."""

    name: str = Field(min_length=1)
    """Abstract network class name used by VMClass interfaces."""
    target: NetworkTarget
    """The port group it maps to."""


class ProviderCapabilities(ApiModel):
    """What this Provider offers: abstract storage and network classes, and features."""

    storage_classes: list[StorageClassMapping] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Storage classes, by name."""
    network_classes: list[NetworkClassMapping] | None = Field(default=None, max_length=100, json_schema_extra=_BY_NAME)
    """Network classes, by name."""
    features: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Features the operator declares (detected features are reported per failure domain)."""


class ProviderSpec(ApiModel):
    """Desired state of a Provider: one backend instance (one vCenter)."""

    provider_class_ref: LocalObjectReference = Field(json_schema_extra=IMMUTABLE)
    """The provider class implementing this backend (``vsphere``); immutable."""
    connection: ProviderConnection
    """Endpoint, credentials and TLS settings."""
    capabilities: ProviderCapabilities | None = None
    """Storage and network classes and features offered."""
    paused: bool | None = None
    """Stop reconciling this Provider (its status keeps the last known failure domains)."""


class StorageClassCapacity(ApiModel):
    """What one storage class of a failure domain stores onto (docs/concepts.md "Capacity")."""

    name: str
    """Storage class name (``spec.capabilities.storageClasses[].name``)."""
    datastore: str
    """``<datacenter>/<datastore or datastore cluster>``: failure domains that share it name the
    same storage, which the scheduler counts once."""
    total_gib: int = Field(ge=0, alias="totalGiB")
    """Its size, GiB (a datastore cluster: the sum over its accessible members)."""
    free_gib: int = Field(ge=0, alias="freeGiB")
    """Its free space as vSphere reports it, GiB."""
    member: str | None = None
    """A datastore cluster: the member datastore VSphereMachine disks of this domain go to (the
    accessible member mounted on the cluster with the most free space at the last measure)."""


class FailureDomainCapacity(ApiModel):
    """Capacity of a failure domain, as the Provider reconciler last wrote it (refreshed
    every 300 s and soon after a machine is provisioned or deleted; a free figure that moved by
    less than 1% keeps its written value). The totals are what the scheduler reserves against;
    the free figures (vSphere's usage) are a second guard (docs/concepts.md "Capacity")."""

    cpu_mhz: int | None = Field(default=None, ge=0, alias="cpuMHz")
    """Free CPU, MHz."""
    memory_mib: int | None = Field(default=None, ge=0, alias="memoryMiB")
    """Free memory, MiB."""
    storage_gib: int | None = Field(default=None, ge=0, alias="storageGiB")
    """Free storage, GiB."""
    memory_total_mib: int | None = Field(default=None, ge=0, alias="memoryTotalMiB")
    """Memory of the domain's connected hosts not in maintenance, MiB: the configured memory of
    the VMs placed there must fit in it."""
    storage_classes: list[StorageClassCapacity] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Per available storage class, the storage it stores onto with its size and free space."""
    update_time: Time | None = None
    """When the inventory walk these figures come from started (RFC 3339, second precision).
    Changes only when the figures are written: a refresh that keeps them keeps it. The scheduler
    counts a VM provisioned at or after this time against the domain, as the figures may not
    include it yet (docs/concepts.md "Capacity"). Absent: every provisioned VM placed there
    counts."""


class FailureDomainRaw(ApiModel):
    """Backend placement of a failure domain."""

    datacenter: str | None = None
    """vSphere datacenter name."""
    cluster: str | None = None
    """vSphere compute cluster name."""


class ProviderFailureDomainAttributes(ApiModel):
    """What a failure domain offers."""

    available_storage_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Storage classes verified reachable from this failure domain."""
    available_network_classes: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Network classes verified present in this failure domain."""
    features: list[str] | None = Field(default=None, json_schema_extra=LIST_SET)
    """Features detected in this failure domain."""
    capacity: FailureDomainCapacity | None = None
    """Free capacity."""
    raw: FailureDomainRaw | None = None
    """Backend placement (datacenter, cluster)."""


FAILURE_DOMAIN_LABELS = ("dc", "cluster")
"""The labels of every failure domain a Provider reports (its datacenter and compute cluster,
``reconcilers.provider.decide``): what selectors and anti-affinity ``topologyKey`` can use
(docs/concepts.md, "Names")."""


class ProviderFailureDomain(ApiModel):
    """One failure domain of a Provider: a (datacenter, compute cluster) pair."""

    name: str = Field(min_length=1, max_length=63)
    """slug(<provider>-<datacenter>-<cluster>)."""
    labels: dict[str, str] | None = None
    """Topology labels (``dc``, ``cluster``) used by selectors and anti-affinity."""
    attributes: ProviderFailureDomainAttributes | None = None
    """Classes, features, capacity and raw placement."""


class VCenterIdentity(ApiModel):
    """The vCenter a Provider reaches, from its ``ServiceContent.about`` (ADR 0013)."""

    instance_uuid: str = Field(min_length=1, alias="instanceUUID")
    """``about.instanceUuid``: the vCenter's identity, the same whatever address reaches it.
    Recorded at the first successful connection; a later endpoint that reaches another vCenter is
    refused while VSphereMachines use the Provider (``VCenterIdentityChanged``), else recorded."""
    version: str | None = None
    """``about.version`` (e.g. ``8.0.2``)."""
    api_type: str | None = None
    """``about.apiType``: ``VirtualCenter`` for a vCenter, ``HostAgent`` for a standalone ESXi."""


class ProviderImageStatus(ApiModel):
    """Whether one VMImage resolves on this Provider. Written by the VMImage controller (its own
    server-side-apply field manager) on the Provider, not on the cluster-scoped VMImage, so only
    those who may read this namespace's Providers see it (issue 23, docs/security.md case 8)."""

    name: str = Field(min_length=1)
    """VMImage name."""
    ready: bool = False
    """Whether the image's template was found on this Provider (in every datacenter it has)."""
    resolved_ref: str | None = None
    """Backend reference of the template found (managed object id)."""
    reason: str | None = None
    """Reconciled, TemplateNotFound, SecretUnavailable, ConnectFailed or LookupFailed."""
    message: str | None = None
    """Human-readable detail."""


class ProviderStatus(ApiModel):
    """Observed state of a Provider."""

    failure_domains: list[ProviderFailureDomain] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Failure domains discovered on the backend; kept on transient errors."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready, ProviderReachable and VCenterUnique."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""
    vcenter: VCenterIdentity | None = None
    """The vCenter the Provider's machines live in (ADR 0013); VSphereMachine calls are refused
    by a vCenter of another instance UUID."""
    images: list[ProviderImageStatus] | None = Field(default=None, json_schema_extra=_BY_NAME)
    """Resolution of each VMImage on this Provider (VMImage controller; the scheduler places a
    VirtualMachine only on a Provider whose row for its image is ready)."""


class Provider(KubeObject):
    """Provider is one backend instance (one vCenter) that VirtualMachines can be placed on."""

    api_version: str = API_VERSION
    kind: str = "Provider"
    spec: ProviderSpec
    status: ProviderStatus | None = None


class ProviderList(ApiModel):
    """A list of Providers."""

    api_version: str = API_VERSION
    kind: str = "ProviderList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[Provider] = Field(default_factory=list)
