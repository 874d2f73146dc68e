"""API groups and versions of banlieue (SPEC §1): plain constants every API module shares."""

from __future__ import annotations

CORE_GROUP = "banlieue.io"
"""Group of banlieue's own kinds (Provider, VMClass, VMImage, VirtualMachine)."""
INFRA_GROUP = "infrastructure.banlieue.io"
"""Group of the CAPI v1beta2 infrastructure kinds."""
VERSION = "v1alpha1"
"""The only served (and storage) version of every kind."""
CORE_API_VERSION = f"{CORE_GROUP}/{VERSION}"
INFRA_API_VERSION = f"{INFRA_GROUP}/{VERSION}"
