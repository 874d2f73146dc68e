"""Backends: the ``Backend`` protocol a hypervisor must offer, and its implementations.

Reconcilers import from here (never pyvmomi): the protocol, its dataclasses and its errors.
"""

from banlieue.backends.base import (
    AuthFailed,
    Backend,
    BackendError,
    Capabilities,
    Capacity,
    CreateResult,
    DiskSpec,
    FailureDomainInfo,
    InvalidSpec,
    Inventory,
    NetworkClass,
    NicSpec,
    NicStatus,
    NotFound,
    StorageClass,
    TaskFailed,
    TemplateInfo,
    TLSVerifyFailed,
    Transient,
    VMChange,
    VMInfo,
    VMSpec,
)
from banlieue.backends.base import Connection as Connection

__all__ = [
    "AuthFailed",
    "Backend",
    "BackendError",
    "Capabilities",
    "Capacity",
    "Connection",
    "CreateResult",
    "DiskSpec",
    "FailureDomainInfo",
    "InvalidSpec",
    "Inventory",
    "NetworkClass",
    "NicSpec",
    "NicStatus",
    "NotFound",
    "StorageClass",
    "TLSVerifyFailed",
    "TaskFailed",
    "TemplateInfo",
    "Transient",
    "VMChange",
    "VMInfo",
    "VMSpec",
]
