"""VMImage (banlieue.io/v1alpha1): an OS image resolved on every Provider (SPEC §2)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from banlieue.api.groups import CORE_API_VERSION as API_VERSION
from banlieue.api.meta import (
    LIST_ATOMIC,
    ApiModel,
    Condition,
    KubeObject,
    ListMeta,
    list_map,
)

_CONDITIONS = list_map("type")

class Architecture(StrEnum):
    """CPU architecture (CAPI NodeInfo names)."""

    AMD64 = "amd64"
    ARM64 = "arm64"


class GuestAgent(StrEnum):
    """How the guest consumes user data."""

    CLOUD_INIT = "cloud-init"
    IGNITION = "ignition"
    NONE = "none"


class ImageReason:
    """Reasons on Provider ``status.images[].reason`` (one VMImage on one Provider)."""

    RECONCILED = "Reconciled"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    SECRET_UNAVAILABLE = "SecretUnavailable"
    CONNECT_FAILED = "ConnectFailed"
    LOOKUP_FAILED = "LookupFailed"


class VMImageConditionReason:
    """Reasons of the VMImage ``Ready`` condition beyond :class:`ImageReason`: Ready is True
    (``Reconciled``) when the template is ready on at least one Provider, else False with the
    first row's ``ImageReason``, or ``NoMatchingProvider`` when there is no row at all (no
    Provider of a class named in ``spec.sources``). Operators: docs/operations.md."""

    NO_MATCHING_PROVIDER = "NoMatchingProvider"


class ImageSource(ApiModel):
    """Where the image lives for one provider class."""

    provider_class: str = Field(min_length=1)
    """Provider class this source applies to (``vsphere``)."""
    kind: Literal["Template"] = "Template"
    """Source kind: Template (a VM template, by name)."""
    ref: str = Field(min_length=1)
    """Template name (or inventory path)."""


class VMImageSpec(ApiModel):
    """An operating system image and where each provider class finds it."""

    os_family: str | None = None
    """OS family (``linux``, ``windows``)."""
    os_distribution: str | None = None
    """Distribution (``ubuntu``)."""
    os_version: str | None = None
    """Version (``22.04``)."""
    architecture: Architecture = Architecture.AMD64
    """amd64 (default, as CAPI's autoscaler assumes) or arm64."""
    guest_agent: GuestAgent = GuestAgent.CLOUD_INIT
    """cloud-init, ignition or none."""
    sources: list[ImageSource] | None = Field(default=None, json_schema_extra=LIST_ATOMIC)
    """Sources per provider class."""


class VMImageStatus(ApiModel):
    """Observed state of a VMImage. Counts only: the VMImage is cluster-scoped, so it names no
    Provider and carries no tenant's error (issue 23); each Provider's own row is its
    ``status.images[]``."""

    providers: int | None = Field(default=None, ge=0)
    """Providers of a class named in ``spec.sources`` the image was looked up on."""
    ready_providers: int | None = Field(default=None, ge=0)
    """How many of them have the image ready."""
    conditions: list[Condition] | None = Field(default=None, json_schema_extra=_CONDITIONS)
    """Ready."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The .metadata.generation last reconciled."""


class VMImage(KubeObject):
    """VMImage is a cluster-scoped operating system image, resolved on every Provider."""

    api_version: str = API_VERSION
    kind: str = "VMImage"
    spec: VMImageSpec
    status: VMImageStatus | None = None


class VMImageList(ApiModel):
    """A list of VMImages."""

    api_version: str = API_VERSION
    kind: str = "VMImageList"
    metadata: ListMeta = Field(default_factory=ListMeta)
    items: list[VMImage] = Field(default_factory=list)
