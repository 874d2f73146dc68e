"""MAC addresses banlieue chooses for the NICs it clones (ADR 0014, docs/performance.md).

The guest's network configuration (guestinfo metadata, ``guestinfo`` module) matches each NIC by
its MAC, so a MAC known before the clone lets the CloneVM_Task carry the whole configuration
(hardware, NICs, guestinfo) and no reconfigure follows it. A NIC whose spec gives its MAC keeps
it; every other NIC of a VM banlieue clones gets ``addressType = manual`` and a MAC chosen here:

- in VMware's range for manually set MACs, ``00:50:56:00:00:00`` - ``00:50:56:3F:FF:FF``
  (vSphere Networking, "MAC Address Assignment from vCenter Server" / "Setting a Static MAC
  Address": the static range is 00:50:56:00:00:00-3F:FF:FF). vCenter's generated MACs use
  ``00:50:56:80``-``BF`` (and ESXi's ``00:0C:29``), so a chosen MAC never equals a generated one;
- at random among the 2^22 values, never one in ``taken`` (every MAC the VM index of that
  vCenter knows: ``banlieue.nic.*`` labels and guest NIC MACs the change watch reports, the
  NICs of every VM read in full, and the MACs this process has reserved for clones in flight:
  ``find.VMIndex.reserve_macs``), retried on a hit.

Residual risk: a MAC another tool set by hand in the same range, on a VM banlieue does not see
(another vCenter on the same L2, a VM without VMware Tools whose extraConfig carries no
``banlieue.nic.*`` label), may be chosen. vCenter reports such a conflict as an event and
alarm, not as a clone failure; the user overrides by giving the NIC its MAC in the spec.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable

MANUAL_PREFIX = (0x00, 0x50, 0x56)
"""VMware's OUI of vCenter-assigned and manual MACs."""
MANUAL_MAX = 0x3FFFFF
"""Largest value of the last 22 bits of a manual MAC (``00:50:56:3f:ff:ff``)."""
ATTEMPTS = 1000
"""Random draws before giving up (the range holds 4,194,304 values)."""

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")


def format_mac(value: int) -> str:
    """``00:50:56:xx:xx:xx`` (lower case) for ``value`` in 0..``MANUAL_MAX``."""
    if not 0 <= value <= MANUAL_MAX:
        raise ValueError(f"{value:#x} is outside VMware's manual MAC range")
    return ":".join(f"{b:02x}" for b in (*MANUAL_PREFIX, value >> 16, (value >> 8) & 0xFF, value & 0xFF))


def in_manual_range(mac: str) -> bool:
    """Whether ``mac`` (any case) is in ``00:50:56:00:00:00`` - ``00:50:56:3f:ff:ff``."""
    mac = mac.lower()
    return bool(_MAC.match(mac)) and mac.startswith("00:50:56:") and int(mac[9:11], 16) <= 0x3F


def choose(taken: Iterable[str], count: int, rand: Callable[[int, int], int] | None = None) -> list[str]:
    """``count`` distinct manual-range MACs, none in ``taken`` (lower-case MACs). ``rand(a, b)``
    draws an integer in [a, b] (default: ``random.SystemRandom().randint``). Raises RuntimeError
    when ``ATTEMPTS`` draws found no free value (the range is nearly full)."""
    draw = rand or random.SystemRandom().randint
    used = {m.lower() for m in taken}
    out: list[str] = []
    for _ in range(count):
        for _attempt in range(ATTEMPTS):
            mac = format_mac(draw(0, MANUAL_MAX))
            if mac not in used:
                break
        else:
            raise RuntimeError(f"no free MAC in VMware's manual range after {ATTEMPTS} draws")
        used.add(mac)
        out.append(mac)
    return out


CONFLICT_REASON = "MacAddressConflict"
"""Reason of a clone vCenter refused for a MAC address already in use."""


def is_conflict(message: str) -> bool:
    """Whether a task fault ``message`` says a MAC address is in use or conflicts (vCenter's
    ``DuplicateMacAddress``-style faults and messages)."""
    text = message.lower()
    return "mac" in text and any(w in text for w in ("conflict", "in use", "duplicate", "already"))
