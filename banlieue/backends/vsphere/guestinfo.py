"""cloud-init guestinfo: the extraConfig keys cloud-init's VMware datasource reads.

Keys (cloud-init "VMware" datasource, DataSourceVMware): ``guestinfo.userdata`` and
``guestinfo.metadata``, each base64 with ``guestinfo.userdata.encoding`` /
``guestinfo.metadata.encoding`` = ``base64`` (CAPV writes the same). Metadata carries
``instance-id`` (the Kubernetes UID: stable for the object's life, so cloud-init runs once per
VM object), ``local-hostname`` and a netplan-style network config v2 (``network``, with
``network.encoding`` unset because it is embedded as a mapping) matching each NIC by MAC.
Metadata is JSON, which is valid YAML for cloud-init.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from banlieue.backends.base import NicSpec

USERDATA = "guestinfo.userdata"
USERDATA_ENCODING = "guestinfo.userdata.encoding"
METADATA = "guestinfo.metadata"
METADATA_ENCODING = "guestinfo.metadata.encoding"


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


def guestinfo(
    instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]], user_data: bytes | None
) -> dict[str, str]:
    """The extraConfig entries to set. Without user data, the userdata keys are cleared ("")."""
    md = json.dumps(metadata(instance_id, hostname, nics), sort_keys=True).encode()
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
