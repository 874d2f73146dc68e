"""Which network card is which: a NIC's spec name is kept on the VM, never inferred from position
(ADR 0012, docs/concepts.md "Changing things that are in use").

Each NIC a VMSpec names is recorded in the VM's ``config.extraConfig`` as
``banlieue.nic.<name> = <MAC>`` (lower case), the card's MAC address: the identity the guest,
its network config (guestinfo metadata matches by MAC) and VMware Tools' ``guest.net`` use too.
A VM banlieue clones gets a MAC banlieue chose for every spec NIC (``macs``, ADR 0014), labelled
by the clone itself. A card added later to an existing VM gets a generated MAC, and has none
before the ReconfigVM that adds it, so that
task writes ``banlieue.nic.<name> = new:<n>`` (``n``: the card's rank among the cards added by
that task) and the next ReconfigVM (the one writing guestinfo, in the same converge) replaces it
with the MAC. Should the process die in between, the next converge resolves it: cards that no
label names are given to the ``new:`` names in device-key order (vCenter assigns keys in the
order of the task's device changes), rank by rank.

Matching rules:

- A VM with no ``banlieue.nic.*`` key at all (just cloned, or converged before labels existed)
  is adopted by position once: the i-th spec NIC is the i-th card in device order (the
  template's cards; those beyond the spec's are removed when the spec lists NICs). The same
  converge writes the labels.
- Otherwise a name matches the card carrying its MAC, and only that one. A name without a
  label (or whose card was removed by hand) gets a new card. A card that a label names is never
  given to another name.
- A labelled card whose name left the spec is kept (same device, same MAC) but disconnected
  (``connectable.startConnected`` and ``connected`` False): the VM leaves that network, and
  re-adding the name connects the same card again. banlieue never removes or repurposes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyVmomi import vim as _vim

vim: Any = _vim

NIC_KEY_PREFIX = "banlieue.nic."
"""extraConfig key prefix of a NIC's name: ``banlieue.nic.<name>`` = its MAC."""

PENDING_PREFIX = "new:"
"""Label value of a card added with a generated MAC whose MAC is not recorded yet: ``new:<rank>``."""


def ethernet_cards(devices: Sequence[Any]) -> list[Any]:
    """The VirtualEthernetCard devices, in device order."""
    return [d for d in devices if isinstance(d, vim.vm.device.VirtualEthernetCard)]


def mac_of(card: Any) -> str:
    """The card's MAC in lower case ("" when vCenter has not assigned one)."""
    return str(card.macAddress or "").lower()


def nic_labels(extra: Mapping[str, str]) -> dict[str, str]:
    """name -> label value (a lower-case MAC or ``new:<rank>``) from ``banlieue.nic.*`` keys."""
    return {k[len(NIC_KEY_PREFIX):]: str(v).lower() for k, v in extra.items() if k.startswith(NIC_KEY_PREFIX) and v}


def _rank(value: str) -> int | None:
    if not value.startswith(PENDING_PREFIX):
        return None
    try:
        return int(value[len(PENDING_PREFIX):])
    except ValueError:
        return None


def match_nics(devices: Sequence[Any], extra: Mapping[str, str], names: Sequence[str]) -> dict[str, Any]:
    """name -> VirtualEthernetCard for the cards that exist (module rules). ``names`` are the
    spec's NIC names in order, used only for the one-time positional adoption of a VM without
    labels; with labels, every labelled name whose card exists is returned (spec or not)."""
    cards = ethernet_cards(devices)
    labels = nic_labels(extra)
    if not labels:
        return {name: cards[i] for i, name in enumerate(names) if i < len(cards)}
    by_mac = {mac_of(c): c for c in cards if mac_of(c)}
    out = {name: by_mac[value] for name, value in labels.items() if value in by_mac}
    pending = sorted((rank, name) for name, value in labels.items() if (rank := _rank(value)) is not None)
    if pending:
        unnamed = sorted((c for c in cards if mac_of(c) not in labels.values()), key=lambda c: int(c.key))
        for (_, name), card in zip(pending, unnamed, strict=False):
            out[name] = card
    return out


def nic_names(devices: Sequence[Any], extra: Mapping[str, str]) -> tuple[str | None, ...]:
    """The name of every VirtualEthernetCard in device order (None: no label names it)."""
    by_key = {int(card.key): name for name, card in match_nics(devices, extra, ()).items()}
    return tuple(by_key.get(int(c.key)) for c in ethernet_cards(devices))


def is_connected(card: Any) -> bool:
    """Whether the card connects at power-on (``connectable.startConnected``; True without one)."""
    conn = card.connectable
    return conn is None or bool(conn.startConnected)
