"""cloud-init guestinfo: the extraConfig keys cloud-init's VMware datasource reads.

Keys (cloud-init "VMware" datasource, DataSourceVMware): ``guestinfo.userdata`` and
``guestinfo.metadata``, each base64 with ``guestinfo.userdata.encoding`` /
``guestinfo.metadata.encoding`` = ``base64`` (CAPV writes the same). Metadata carries
``instance-id`` (the Kubernetes UID: stable for the object's life, so cloud-init runs once per
VM object), ``local-hostname`` and a netplan-style network config v2 (``network``, with
``network.encoding`` unset because it is embedded as a mapping) matching each NIC by MAC.
Metadata is JSON, which is valid YAML for cloud-init.

Size: a guestinfo value holds at most ``VALUE_MAX_BYTES`` (64 KiB; open-vm-tools
``guest_msg_def.h`` ``GUESTMSG_MAX_IN_SIZE``; the VMX file as a whole is limited to 1 MiB by
default, ``tools.setInfo.sizeLimit``). ``size_error`` names a value that is too large, with what
to do; ``guestinfo`` raises InvalidSpec for one.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from banlieue.backends.base import InvalidSpec, NicSpec, VMSpec

USERDATA = "guestinfo.userdata"
USERDATA_ENCODING = "guestinfo.userdata.encoding"
METADATA = "guestinfo.metadata"
METADATA_ENCODING = "guestinfo.metadata.encoding"
VALUE_MAX_BYTES = 65536
"""Largest guestinfo value vSphere delivers to the guest (open-vm-tools guest_msg_def.h)."""
PLACEHOLDER_MAC = "00:00:00:00:00:00"
"""A MAC of the final length, to size the metadata before vCenter has generated the MACs."""


def network_config(nics: list[tuple[NicSpec, str]]) -> dict[str, Any]:
    """Network config v2 for (NIC spec, MAC) pairs: ``eth<i>`` matched by MAC address."""
    ethernets: dict[str, Any] = {}
    for i, (nic, mac) in enumerate(nics):
        eth: dict[str, Any] = {"match": {"macaddress": mac.lower()}, "set-name": f"eth{i}"}
        eth["dhcp4"] = bool(nic.dhcp4)
        eth["dhcp6"] = bool(nic.dhcp6)
        if nic.addresses:
            eth["addresses"] = list(nic.addresses)
        routes = []
        if nic.gateway4:
            routes.append({"to": "0.0.0.0/0", "via": nic.gateway4})
        if nic.gateway6:
            routes.append({"to": "::/0", "via": nic.gateway6})
        if routes:
            eth["routes"] = routes
        if nic.nameservers:
            eth["nameservers"] = {"addresses": list(nic.nameservers)}
        if nic.mtu:
            eth["mtu"] = nic.mtu
        ethernets[f"id{i}"] = eth
    return {"version": 2, "ethernets": ethernets}


def metadata(instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]]) -> dict[str, Any]:
    return {"instance-id": instance_id, "local-hostname": hostname, "network": network_config(nics)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encoded_size(data: bytes) -> int:
    """Length in bytes of ``data`` base64-encoded (with padding): 4 per started 3."""
    return 4 * ((len(data) + 2) // 3)


def size_error(instance_id: str, hostname: str, nics: list[NicSpec], user_data: bytes | None) -> str | None:
    """An actionable message when the base64 user data or metadata would exceed
    ``VALUE_MAX_BYTES``, else None. MACs not known yet are sized as ``PLACEHOLDER_MAC``."""
    if user_data and encoded_size(user_data) > VALUE_MAX_BYTES:
        return (
            f"bootstrap user data is {len(user_data)} bytes ({encoded_size(user_data)} base64-encoded); a vSphere "
            f"guestinfo value holds at most {VALUE_MAX_BYTES} bytes: shrink it, or gzip it (cloud-init detects "
            "gzip-compressed user data)"
        )
    md = _metadata_bytes(instance_id, hostname, [(nic, nic.mac_address or PLACEHOLDER_MAC) for nic in nics])
    if encoded_size(md) > VALUE_MAX_BYTES:
        return (
            f"cloud-init metadata (host name and network configuration of {len(nics)} NICs) is {len(md)} bytes "
            f"({encoded_size(md)} base64-encoded); a vSphere guestinfo value holds at most {VALUE_MAX_BYTES} bytes: "
            "use fewer addresses, routes or name servers"
        )
    return None


def spec_error(spec: VMSpec) -> str | None:
    """``size_error`` of what ``spec`` would put in guestinfo (host name, NICs, user data): the
    vSphere backend's ``Backend.spec_error``."""
    return size_error(spec.uid, spec.hostname or spec.name, list(spec.nics), spec.user_data)


def _metadata_bytes(instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]]) -> bytes:
    return json.dumps(metadata(instance_id, hostname, nics), sort_keys=True).encode()


def guestinfo(
    instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]], user_data: bytes | None
) -> dict[str, str]:
    """The extraConfig entries to set. Without user data, the userdata keys are cleared ("").
    Raises InvalidSpec when a base64 value would exceed ``VALUE_MAX_BYTES`` (see ``size_error``)."""
    error = size_error(instance_id, hostname, [nic for nic, _ in nics], user_data)
    if error is not None:
        raise InvalidSpec(error)
    md = _metadata_bytes(instance_id, hostname, nics)
    return {
        METADATA: _b64(md),
        METADATA_ENCODING: "base64",
        USERDATA: _b64(user_data) if user_data else "",
        USERDATA_ENCODING: "base64" if user_data else "",
    }


def decode(extra: dict[str, str]) -> tuple[dict[str, Any] | None, bytes | None]:
    """Inverse of ``guestinfo`` (for tests and diagnostics): (metadata, user data)."""
    md = json.loads(base64.b64decode(extra[METADATA])) if extra.get(METADATA) else None
    ud = base64.b64decode(extra[USERDATA]) if extra.get(USERDATA) else None
    return md, ud
