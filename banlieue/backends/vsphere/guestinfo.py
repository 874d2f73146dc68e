"""cloud-init guestinfo: the extraConfig keys cloud-init's VMware datasource reads.

Keys (cloud-init "VMware" datasource, DataSourceVMware): ``guestinfo.userdata`` and
``guestinfo.metadata``, each base64 with ``guestinfo.userdata.encoding`` /
``guestinfo.metadata.encoding`` = ``base64`` (CAPV writes the same). Metadata carries
``instance-id`` (the Kubernetes UID: stable for the object's life, so cloud-init runs once per
VM object), ``local-hostname`` and a netplan-style network config v2 (``network``, with
``network.encoding`` unset because it is embedded as a mapping) matching each NIC by MAC and
naming it after the spec NIC (``interface_name``: ``set-name``), never ``eth<i>`` by position.
Metadata is JSON, which is valid YAML for cloud-init.

Redaction (issue 23 case 3): the user data (often a kubeadm bootstrap token, or whatever Secret
a VirtualMachine's ``userData`` names) would otherwise stay in ``guestinfo.userdata`` for the
VM's life, readable by vCenter users and by any process in the guest. The metadata asks the
datasource to clear it once read: ``redact: [userdata]`` (cloud-init's VMware datasource docs,
"Redacting sensitive information"; the key it reads first) and the same list under its former
name ``cleanup-guestinfo`` (read by cloud-init when ``redact`` is absent, and the only one the
pre-merge vmware/cloud-init-vmware-guestinfo datasource knows). The datasource then sets
``guestinfo.userdata`` to ``---`` (``REDACTED``, valid empty YAML) and its ``.encoding`` to a
space, through ``vmware-rpctool info-set`` from inside the guest. ``keep_redacted`` stops a later
converge from writing the user data back. Guests without cloud-init's VMware datasource (e.g.
Ignition) ignore the keys: their user data stays until the VM is deleted.

Size: a guestinfo value holds at most ``VALUE_MAX_BYTES`` (64 KiB; open-vm-tools
``guest_msg_def.h`` ``GUESTMSG_MAX_IN_SIZE``; the VMX file as a whole is limited to 1 MiB by
default, ``tools.setInfo.sizeLimit``). User data whose base64 does not fit is gzip-compressed
and written with ``guestinfo.userdata.encoding`` = ``gzip+base64``, an encoding cloud-init's
VMware datasource decodes (CAPV writes kubeadm bootstrap data the same way; a control plane's,
with certificates, runs to tens of KiB). ``size_error`` names a value that does not fit even
so, with both sizes and what to do; ``guestinfo`` raises InvalidSpec for one.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from banlieue.backends.base import InvalidSpec, NicSpec, VMInfo, VMSpec

USERDATA = "guestinfo.userdata"
USERDATA_ENCODING = "guestinfo.userdata.encoding"
METADATA = "guestinfo.metadata"
METADATA_ENCODING = "guestinfo.metadata.encoding"
REDACTED = "---"
"""What cloud-init's VMware datasource leaves in a redacted guestinfo key (``GUESTINFO_EMPTY_YAML_VAL``)."""
REDACT_KEYS = ["userdata"]
"""The guestinfo keys (without ``guestinfo.``) the metadata asks the guest to redact once read."""
VALUE_MAX_BYTES = 65536
"""Largest guestinfo value vSphere delivers to the guest (open-vm-tools guest_msg_def.h)."""
PLACEHOLDER_MAC = "00:00:00:00:00:00"
"""A MAC of the final length, to size the metadata before vCenter has generated the MACs."""


IFNAME_MAX = 15
"""Longest Linux interface name (``IFNAMSIZ`` 16 with its NUL, include/uapi/linux/if.h)."""
_IFNAME_AS_IS = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,14}$")
_IFNAME_BAD = re.compile(r"[^A-Za-z0-9_-]")


def interface_name(nic_name: str) -> str:
    """The guest interface name (netplan ``set-name``) of the spec NIC ``nic_name``: the name
    itself when it is a valid Linux interface name of the conservative form
    ``[A-Za-z_][A-Za-z0-9_-]{0,14}`` (the kernel's ``dev_valid_name`` refuses "/", ":",
    whitespace and more than 15 bytes; systemd/udev also refuse all-digit names), else its first 8
    characters with every other character replaced by ``-`` (``n`` first when it does not start
    with a letter or ``_``), then ``-`` and 6 hex digits of the SHA-256 of the whole name.
    A function of this one name only, so removing or reordering other NICs never renames it."""
    if _IFNAME_AS_IS.match(nic_name):
        return nic_name
    base = _IFNAME_BAD.sub("-", nic_name)
    if not re.match(r"^[A-Za-z_]", base):
        base = "n" + base
    digest = hashlib.sha256(nic_name.encode()).hexdigest()[:6]
    return f"{base[:IFNAME_MAX - 7]}-{digest}"


def interface_name_clash(names: Sequence[str]) -> str | None:
    """An actionable message when two spec NIC ``names`` get the same guest interface name
    (``interface_name``: a valid name equal to another one's shortened form), else None."""
    seen: dict[str, str] = {}
    for name in names:
        ifname = interface_name(name)
        if ifname in seen:
            return (f"NICs {seen[ifname]!r} and {name!r} would both be named {ifname!r} in the guest "
                    f"(Linux interface names are at most {IFNAME_MAX} characters of letters, digits, '-' and '_'): "
                    "rename one of them")
        seen[ifname] = name
    return None


def network_config(nics: list[tuple[NicSpec, str]]) -> dict[str, Any]:
    """Network config v2 for (NIC spec, MAC) pairs: each interface matched by its card's MAC
    and named by its spec NIC's name (``interface_name``), never by its position, so a NIC
    removed from or moved in the spec renames or re-addresses no other interface (issue 19).
    The netplan ID (the ``ethernets`` key) is that name too."""
    ethernets: dict[str, Any] = {}
    for nic, mac in nics:
        ifname = interface_name(nic.name)
        eth: dict[str, Any] = {"match": {"macaddress": mac.lower()}, "set-name": ifname}
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
        ethernets[ifname] = eth
    return {"version": 2, "ethernets": ethernets}


def metadata(instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]]) -> dict[str, Any]:
    """cloud-init metadata: instance id, host name, network config and the redaction request."""
    return {"instance-id": instance_id, "local-hostname": hostname, "network": network_config(nics),
            "redact": list(REDACT_KEYS), "cleanup-guestinfo": list(REDACT_KEYS)}


def keep_redacted(want: dict[str, str], have: dict[str, str]) -> dict[str, str]:
    """``want`` without the user data keys when the VM's ``have`` shows the guest redacted them
    (``guestinfo.userdata`` = ``REDACTED``, a value banlieue never writes): a later converge must
    not put the bootstrap secret back."""
    if have.get(USERDATA, "").strip() != REDACTED:
        return want
    return {k: v for k, v in want.items() if k not in (USERDATA, USERDATA_ENCODING)}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encoded_size(data: bytes) -> int:
    """Length in bytes of ``data`` base64-encoded (with padding): 4 per started 3."""
    return 4 * ((len(data) + 2) // 3)


def _gzip(data: bytes) -> bytes:
    # mtime=0: the same user data always gives the same value, so a converge that compares
    # the VM's guestinfo with the wanted one sees no change where there is none.
    return gzip.compress(data, compresslevel=9, mtime=0)


def encode_user_data(user_data: bytes) -> tuple[str, str]:
    """(value, encoding) for ``guestinfo.userdata``: ``base64`` when that fits
    ``VALUE_MAX_BYTES``, else ``gzip+base64`` (which may still not fit: see ``size_error``)."""
    if encoded_size(user_data) <= VALUE_MAX_BYTES:
        return _b64(user_data), "base64"
    return _b64(_gzip(user_data)), "gzip+base64"


def size_error(instance_id: str, hostname: str, nics: list[NicSpec], user_data: bytes | None) -> str | None:
    """An actionable message when the base64 user data or metadata would exceed
    ``VALUE_MAX_BYTES``, or two NICs would get one guest interface name
    (``interface_name_clash``), else None. MACs not known yet are sized as ``PLACEHOLDER_MAC``."""
    if user_data and encoded_size(user_data) > VALUE_MAX_BYTES:
        value, _ = encode_user_data(user_data)
        if len(value) > VALUE_MAX_BYTES:
            return (
                f"bootstrap user data is {len(user_data)} bytes ({encoded_size(user_data)} base64-encoded, "
                f"{len(value)} gzip+base64-encoded); a vSphere guestinfo value holds at most {VALUE_MAX_BYTES} "
                "bytes even compressed: shrink it (move large files out of the cloud-config, fetch them at boot)"
            )
    clash = interface_name_clash([nic.name for nic in nics])
    if clash is not None:
        return clash
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


def metadata_drifted(vm: VMInfo, spec: VMSpec) -> bool:
    """Whether ``spec`` asks for other cloud-init metadata (host name, network configuration of
    each NIC, matched by its card's MAC) than the VM's ``guestinfo.metadata`` holds: a day-2
    change of a running VM's addresses, gateways or name servers (found by a new-user pass: it
    never reached the VM). False when the VM's extraConfig was not read or a spec NIC has no named
    card yet (the NIC converge comes first and writes the metadata with it). The comparison is of
    the exact value a converge writes (sorted JSON, base64), so a converged VM never compares
    unequal."""
    have = vm.extra_config.get(METADATA)
    if have is None:
        return False
    cards = {n.name: n.mac_address for n in vm.nics if n.name is not None}
    if any(not cards.get(nic.name) for nic in spec.nics):
        return False
    pairs = [(nic, cards[nic.name]) for nic in spec.nics]
    return _b64(_metadata_bytes(spec.uid, spec.hostname or spec.name, pairs)) != have


def _metadata_bytes(instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]]) -> bytes:
    return json.dumps(metadata(instance_id, hostname, nics), sort_keys=True).encode()


def guestinfo(
    instance_id: str, hostname: str, nics: list[tuple[NicSpec, str]], user_data: bytes | None
) -> dict[str, str]:
    """The extraConfig entries to set. Without user data, the userdata keys are cleared ("").
    Raises InvalidSpec when a base64 value would exceed ``VALUE_MAX_BYTES`` (see ``size_error``)."""
    error = size_error(instance_id, hostname, [nic for nic, _ in nics], user_data)
    if error is not None:
        raise InvalidSpec(error, public=True)
    md = _metadata_bytes(instance_id, hostname, nics)
    value, encoding = encode_user_data(user_data) if user_data else ("", "")
    return {
        METADATA: _b64(md),
        METADATA_ENCODING: "base64",
        USERDATA: value,
        USERDATA_ENCODING: encoding,
    }


def decode(extra: dict[str, str]) -> tuple[dict[str, Any] | None, bytes | None]:
    """Inverse of ``guestinfo`` (for tests and diagnostics): (metadata, user data)."""
    md = json.loads(base64.b64decode(extra[METADATA])) if extra.get(METADATA) else None
    ud = base64.b64decode(extra[USERDATA]) if extra.get(USERDATA) else None
    if ud is not None and extra.get(USERDATA_ENCODING) == "gzip+base64":
        ud = gzip.decompress(ud)
    return md, ud
