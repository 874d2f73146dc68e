"""Kind metadata of every banlieue kind, as plain data (SPEC §1).

``banlieue.api`` imports pydantic only, so the runtime builds its own ``ResourceKind`` from
these records, e.g. ``ResourceKind(k.group, k.version, k.kind, k.plural, k.namespaced)``.
crdgen reads the same records for names, scope, short names, categories, subresources and
printer columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from banlieue.api import core, infrastructure
from banlieue.api.meta import ApiModel, KubeObject

CAPI_CONTRACT_LABEL = "cluster.x-k8s.io/v1beta2"
"""CRD label CAPI reads to find the versions satisfying contract v1beta2 (value: ``_``-joined versions)."""


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry: header ``name``, JSONPath, OpenAPI ``type``."""

    name: str
    json_path: str
    type: str = "string"
    description: str = ""
    priority: int = 0


READY_COLUMN = PrinterColumn("Ready", '.status.conditions[?(@.type=="Ready")].status', description="Ready condition status")
REASON_COLUMN = PrinterColumn(
    "Reason", '.status.conditions[?(@.type=="Ready")].reason', description="Ready condition reason", priority=1
)
AGE_COLUMN = PrinterColumn("Age", ".metadata.creationTimestamp", "date")
CLUSTER_COLUMN = PrinterColumn(
    "Cluster", r".metadata.labels.cluster\.x-k8s\.io/cluster-name", description="CAPI Cluster (its label)"
)
"""CAPI sets the label on the infrastructure objects of a Cluster. The dotted form with the key's
dots escaped is what kube-apiserver's printer (client-go JSONPath) reads: the bracketed form
``['cluster.x-k8s.io/cluster-name']`` printed an empty column on kube-apiserver v1.34 while the
API double filled it (found by a new-user pass on ``banlieue dev --capi``; the kubectl
differential test now compares this column on both servers)."""
VM_REASON_COLUMN = PrinterColumn(
    "Reason", '.status.conditions[?(@.type=="Ready")].reason', description="Ready condition reason"
)
"""A VirtualMachine's Ready reason in the default table (``kubectl get bvm``): what it waits for or
why it failed (``NotScheduled``, ``WaitingForInfrastructure``, ``VMNotFound``...; ``Ready``)."""


@dataclass(frozen=True, slots=True)
class KindInfo:
    """Everything known about one kind apart from its schema.

    ``model`` is the pydantic class of the object and ``list_model`` of its List. ``namespaced``
    is False for cluster-scoped kinds. ``status_subresource`` says whether ``/status`` exists.
    ``contract_versions`` is non-empty for CAPI infrastructure kinds (CRD label value).
    ``root_rules`` are CEL rules on the whole object (``x-kubernetes-validations`` at the schema's
    root, where kube-apiserver lets a rule read ``self.metadata.name``).
    """

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    namespaced: bool
    categories: tuple[str, ...]
    status_subresource: bool
    model: type[KubeObject]
    list_model: type[ApiModel]
    printer_columns: tuple[PrinterColumn, ...] = field(default=())
    contract_versions: tuple[str, ...] = field(default=())
    root_rules: tuple[dict[str, str], ...] = field(default=())

    @property
    def api_version(self) -> str:
        """``<group>/<version>``."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """CRD name, CAPI rule ``<lower-case plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @property
    def list_kind(self) -> str:
        """Kind of the List (``<Kind>List``)."""
        return f"{self.kind}List"


VM_NAME_MAX = 63
VM_NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {VM_NAME_MAX}",
    "message": f"a VirtualMachine name must be at most {VM_NAME_MAX} characters: it is the value of its "
               "VSphereMachine's banlieue.io/owned-by label (label values are at most 63 characters)",
}
"""VirtualMachine names longer than a label value could never be realised (the VSphereMachine
apply was refused, 422, on every retry): rejected when the object is created instead."""

_CORE_CATEGORIES = ("banlieue",)
_INFRA_CATEGORIES = ("banlieue", "cluster-api")
_INFRA_CONTRACT = (infrastructure.VERSION,)

_KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        core.GROUP, core.VERSION, "Provider", "providers", "provider", ("bprov",), True, _CORE_CATEGORIES, True,
        core.Provider, core.ProviderList,
        (
            PrinterColumn("Class", ".spec.providerClassRef.name"),
            PrinterColumn("Endpoint", ".spec.connection.endpoint"),
            READY_COLUMN, REASON_COLUMN, AGE_COLUMN,
        ),
    ),
    KindInfo(
        core.GROUP, core.VERSION, "VMClass", "vmclasses", "vmclass", ("bvmc",), False, _CORE_CATEGORIES, False,
        core.VMClass, core.VMClassList,
        (
            PrinterColumn("CPUs", ".spec.hardware.cpus", "integer"),
            PrinterColumn("MemoryMiB", ".spec.hardware.memoryMiB", "integer"),
            PrinterColumn("Firmware", ".spec.firmware", priority=1),
            AGE_COLUMN,
        ),
    ),
    KindInfo(
        core.GROUP, core.VERSION, "VMImage", "vmimages", "vmimage", ("bvmi",), False, _CORE_CATEGORIES, True,
        core.VMImage, core.VMImageList,
        (
            PrinterColumn("Distribution", ".spec.osDistribution"),
            PrinterColumn("Version", ".spec.osVersion"),
            PrinterColumn("Arch", ".spec.architecture"),
            PrinterColumn("ReadyProviders", ".status.readyProviders", "integer"),
            PrinterColumn("Providers", ".status.providers", "integer", priority=1),
            READY_COLUMN, AGE_COLUMN,
        ),
    ),
    KindInfo(
        core.GROUP, core.VERSION, "VirtualMachine", "virtualmachines", "virtualmachine", ("bvm",), True,
        _CORE_CATEGORIES, True, core.VirtualMachine, core.VirtualMachineList,
        (
            PrinterColumn("Class", ".spec.classRef.name"),
            PrinterColumn("Image", ".spec.imageRef.name"),
            PrinterColumn("Provider", ".status.scheduled.providerName"),
            PrinterColumn("FailureDomain", ".status.scheduled.failureDomain"),
            PrinterColumn("Power", ".status.observedPowerState"),
            PrinterColumn("IP", ".status.addresses[0].address"),
            READY_COLUMN, VM_REASON_COLUMN, AGE_COLUMN,
        ),
        root_rules=(VM_NAME_RULE,),
    ),
    KindInfo(
        infrastructure.GROUP, infrastructure.VERSION, "VSphereMachine", "vspheremachines", "vspheremachine",
        ("vsm",), True, _INFRA_CATEGORIES, True, infrastructure.VSphereMachine, infrastructure.VSphereMachineList,
        (
            CLUSTER_COLUMN,
            PrinterColumn("FailureDomain", ".spec.failureDomain"),
            PrinterColumn("ProviderID", ".spec.providerID"),
            PrinterColumn("Power", ".status.powerState"),
            PrinterColumn("Provisioned", ".status.initialization.provisioned", "boolean"),
            READY_COLUMN, REASON_COLUMN, AGE_COLUMN,
        ),
        _INFRA_CONTRACT,
    ),
    KindInfo(
        infrastructure.GROUP, infrastructure.VERSION, "VSphereMachineTemplate", "vspheremachinetemplates",
        "vspheremachinetemplate", ("vsmt",), True, _INFRA_CATEGORIES, True,
        infrastructure.VSphereMachineTemplate, infrastructure.VSphereMachineTemplateList,
        (
            PrinterColumn("CPUs", ".spec.template.spec.numCPUs", "integer"),
            PrinterColumn("MemoryMiB", ".spec.template.spec.memoryMiB", "integer"),
            PrinterColumn("Template", ".spec.template.spec.template"),
            AGE_COLUMN,
        ),
        _INFRA_CONTRACT,
    ),
    KindInfo(
        infrastructure.GROUP, infrastructure.VERSION, "VSphereCluster", "vsphereclusters", "vspherecluster",
        ("vsc",), True, _INFRA_CATEGORIES, True, infrastructure.VSphereCluster, infrastructure.VSphereClusterList,
        (
            CLUSTER_COLUMN,
            PrinterColumn("Endpoint", ".spec.controlPlaneEndpoint.host"),
            PrinterColumn("Provisioned", ".status.initialization.provisioned", "boolean"),
            READY_COLUMN, REASON_COLUMN, AGE_COLUMN,
        ),
        _INFRA_CONTRACT,
    ),
    KindInfo(
        infrastructure.GROUP, infrastructure.VERSION, "VSphereClusterTemplate", "vsphereclustertemplates",
        "vsphereclustertemplate", ("vsct",), True, _INFRA_CATEGORIES, False,
        infrastructure.VSphereClusterTemplate, infrastructure.VSphereClusterTemplateList,
        (AGE_COLUMN,),
        _INFRA_CONTRACT,
    ),
)


def resource_kinds() -> tuple[KindInfo, ...]:
    """Every banlieue kind, banlieue.io first, in a stable order."""
    return _KINDS


def kind_info(kind: str, group: str | None = None) -> KindInfo:
    """The KindInfo of ``kind`` (optionally within ``group``); raises ``KeyError`` when unknown."""
    for info in _KINDS:
        if info.kind == kind and (group is None or info.group == group):
            return info
    raise KeyError(f"unknown kind {kind!r}" + (f" in group {group!r}" if group else ""))


def parse_object(raw: dict[str, Any]) -> KubeObject:
    """Parse a wire object into its model by ``apiVersion`` and ``kind``.

    Raises ``KeyError`` for a kind banlieue does not define and ``pydantic.ValidationError`` for a
    malformed object.
    """
    api_version = str(raw.get("apiVersion", ""))
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    info = kind_info(str(raw.get("kind", "")), group)
    return info.model.model_validate(raw)


def dump_object(obj: ApiModel) -> dict[str, Any]:
    """The wire dict of ``obj`` (camelCase, no ``None``); inverse of ``parse_object``."""
    return obj.to_wire()
