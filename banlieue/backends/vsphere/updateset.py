"""A lean, streaming reader of the change watch's ``WaitForUpdatesEx`` responses.

The watch (``watch.VMWatch``) only needs, per VM in an update: its moref, the update kind
(``enter``/``modify``/``leave``), and a few values: the ``banlieue.uid`` and ``banlieue.nic.*`` extraConfig entries,
``config.instanceUuid``, ``config.template``, and for ``find.VMIndex.observe``
``config.changeVersion``, ``runtime.powerState``, ``guest.ipAddress`` and, of ``guest.net``, each
NIC's MAC and addresses (``KEPT_PATHS``). pyVmomi's deserializer builds the whole
``UpdateSet`` first: every ``OptionValue`` of every VM's extraConfig (guestinfo user data
included), every ``GuestNicInfo`` with its IP stack, as typed objects, before the watch looks
at any of it. A collector's first batch lists every VM, so at 10,000 VMs that tree was about 2.3
million Python objects (~150 MiB) built over 25 s on the watch threads while the reconcilers
ran; pymalloc cannot return an arena that still holds one live block, so the RSS kept that peak
(``bench/e2e_memprobe.py`` timeline, docs/performance.md).

:func:`read_update_set` parses the response incrementally (``xml.etree.ElementTree.XMLPullParser``,
64 KiB at a time) and drops each ``objectSet`` element as soon as it is read, so memory is bounded
by one VM's update whatever the batch size; other property values are reported by name only
(``val`` None): the reconcilers re-read what they need. A SOAP fault is handed to pyVmomi's own
deserializer, so faults are raised exactly as before.

Wire format (vSphere Web Services API, ``UpdateSet``): ``returnval`` holds ``version``, then
``filterSet`` elements (``filter``, ``objectSet*``), then ``truncated``; an ``objectSet`` holds
``kind``, ``obj`` (text: the moref) and ``changeSet*`` (``name``, ``op``, ``val``). An empty
``WaitForUpdatesExResponse`` (no ``returnval``) means the long poll timed out: None.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VIM = "{urn:vim25}"
SOAP_FAULT = "{http://schemas.xmlsoap.org/soap/envelope/}Fault"
CHUNK_BYTES = 64 * 1024
KEPT_PATHS = frozenset({"config.extraConfig", "config.instanceUuid", "config.template", "config.changeVersion",
                        "runtime.powerState", "guest.ipAddress", "guest.net"})
"""Property paths whose values are read; others come back with ``val`` None."""


@dataclass(slots=True)
class Ref:
    """A managed object reference: ``_moId`` as in pyVmomi (``properties.moid`` reads it)."""

    _moId: str  # pyVmomi's attribute name
    type: str = ""


NIC_KEY_PREFIX = "banlieue.nic."
"""extraConfig keys kept besides the UID (``nics.NIC_KEY_PREFIX``: each NIC's MAC)."""


@dataclass(slots=True)
class Option:
    """One extraConfig ``OptionValue`` (only ``banlieue.uid`` and ``banlieue.nic.*`` are kept)."""

    key: str
    value: str


@dataclass(slots=True)
class Change:
    """``PropertyChange``: ``val`` is None for paths outside ``KEPT_PATHS``."""

    name: str
    op: str
    val: Any = None


@dataclass(slots=True)
class ObjectUpdate:
    """``ObjectUpdate``: kind ``enter`` / ``modify`` / ``leave``."""

    kind: str
    obj: Ref
    changeSet: list[Change] = field(default_factory=list)  # vSphere's field name


@dataclass(slots=True)
class FilterUpdate:
    """``PropertyFilterUpdate``."""

    objectSet: list[ObjectUpdate] = field(default_factory=list)  # vSphere's field name


@dataclass(slots=True)
class UpdateSet:
    """``UpdateSet``: what ``VMWatch._changes`` reads."""

    version: str = ""
    truncated: bool = False
    filterSet: list[FilterUpdate] = field(default_factory=list)  # vSphere's field name


def _text(el: ET.Element | None) -> str:
    return (el.text or "").strip() if el is not None else ""


def _object_update(el: ET.Element, uid_key: str) -> ObjectUpdate:
    obj = el.find(f"{VIM}obj")
    update = ObjectUpdate(kind=_text(el.find(f"{VIM}kind")),
                          obj=Ref(_text(obj), obj.get("type", "") if obj is not None else ""))
    for ch in el.iterfind(f"{VIM}changeSet"):
        name = _text(ch.find(f"{VIM}name"))
        change = Change(name=name, op=_text(ch.find(f"{VIM}op")))
        val = ch.find(f"{VIM}val")
        if val is not None and name in KEPT_PATHS:
            if name == "config.extraConfig":
                # The UID, and the NIC labels (``banlieue.nic.<name>`` = MAC) for the MACs in use
                # (``macs``): a few bytes per NIC, never guestinfo.
                change.val = [Option(key, _text(o.find(f"{VIM}value"))) for o in val.iterfind(f"{VIM}OptionValue")
                              if (key := _text(o.find(f"{VIM}key"))) == uid_key or key.startswith(NIC_KEY_PREFIX)]
            elif name == "config.template":
                change.val = _text(val) == "true"
            elif name == "guest.net":
                # (MAC, its addresses) per guest NIC: what find.to_vm_info takes from guest.net.
                change.val = tuple((_text(n.find(f"{VIM}macAddress")).lower(),
                                    tuple(_text(ip) for ip in n.iterfind(f"{VIM}ipAddress")))
                                   for n in val.iterfind(f"{VIM}GuestNicInfo"))
            else:
                change.val = _text(val)
        update.changeSet.append(change)
    return update


def read_update_set(read: Callable[[int], bytes], uid_key: str,
                    on_fault: Callable[[bytes], Any]) -> UpdateSet | None:
    """Parse a ``WaitForUpdatesEx`` response body read with ``read(n)`` (a file's ``read``).

    Returns the lean :class:`UpdateSet`, or None for an empty response (long poll timed out).
    A SOAP fault: the whole body is passed to ``on_fault`` (pyVmomi's deserializer, which
    returns the fault object for the stub to raise) and its result is returned.
    Raises ``xml.etree.ElementTree.ParseError`` on malformed XML.
    """
    parser: Any = ET.XMLPullParser(events=("start", "end"))  # typeshed: generic and event-typed
    head: list[bytes] | None = []  # the bytes read until the Body's first child is known
    result: UpdateSet | None = None
    depth = 0  # of the element just started / ending (Envelope = 1)
    body_depth = returnval_depth = -1
    current_filter: tuple[ET.Element, FilterUpdate] | None = None
    while True:
        chunk = read(CHUNK_BYTES)
        if head is not None:
            head.append(chunk)
        if chunk:
            parser.feed(chunk)
        else:
            parser.close()
        for event, el in parser.read_events():
            assert isinstance(el, ET.Element)
            if event == "start":
                depth += 1
                if body_depth < 0 and el.tag.endswith("}Body"):
                    body_depth = depth
                elif head is not None and depth == body_depth + 1:
                    if el.tag == SOAP_FAULT:
                        while chunk:
                            chunk = read(CHUNK_BYTES)
                            head.append(chunk)
                        return on_fault(b"".join(head))  # type: ignore[no-any-return]
                    head = None  # a response, not a fault: stream from now on
                elif el.tag == f"{VIM}returnval" and depth == body_depth + 2:
                    returnval_depth = depth
                    result = UpdateSet()
                elif result is not None and el.tag == f"{VIM}filterSet" and depth == returnval_depth + 1:
                    current_filter = (el, FilterUpdate())
                    result.filterSet.append(current_filter[1])
                continue
            if result is not None and depth == returnval_depth + 2 and current_filter is not None \
                    and el.tag == f"{VIM}objectSet":
                current_filter[1].objectSet.append(_object_update(el, uid_key))
                current_filter[0].remove(el)  # bounded memory: one objectSet at a time
            elif result is not None and depth == returnval_depth + 1:
                if el.tag == f"{VIM}version":
                    result.version = _text(el)
                elif el.tag == f"{VIM}truncated":
                    result.truncated = _text(el) == "true"
                elif el.tag == f"{VIM}filterSet":
                    current_filter = None
                    el.clear()
            depth -= 1
        if not chunk:
            return result
