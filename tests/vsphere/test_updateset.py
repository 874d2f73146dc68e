"""The change watch's lean ``WaitForUpdatesEx`` reader (``updateset``): against vcsim, it reports
what pyVmomi's own deserializer reports for every field the watch reads; faults are still raised;
a timed-out long poll is None; memory stays bounded by one object update, whatever the batch."""

from __future__ import annotations

import ssl
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import SoapAdapter, vim, vmodl

from banlieue.backends.vsphere import deserializer, updateset
from banlieue.backends.vsphere.find import UID_KEY
from banlieue.backends.vsphere.properties import PC, vm_traversal
from banlieue.backends.vsphere.watch import WATCH_PATHS
from banlieue.testing.vcsim import VcsimProcess, wait_task

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]


@pytest.fixture
def private_vcsim(vcsim_factory: Callable[..., VcsimProcess]) -> VcsimProcess:
    """A vcsim of its own: the test writes extraConfig on its VMs."""
    return vcsim_factory()


@pytest.fixture
def si(private_vcsim: VcsimProcess) -> Iterator[Any]:
    s = SmartConnect(host=private_vcsim.host, port=private_vcsim.port, user=private_vcsim.username,
                     pwd=private_vcsim.password, sslContext=ssl.create_default_context(cafile=private_vcsim.ca_file))
    yield s
    Disconnect(s)


def _stub(vc: VcsimProcess, si: Any, lean: bool) -> Any:
    """A second stub on ``si``'s session, as the watch makes one (optionally marked lean)."""
    stub: Any = SoapAdapter.SoapStubAdapter(url=f"https://{vc.host}:{vc.port}/sdk", version=si._stub.version,
                                            sslContext=ssl.create_default_context(cafile=vc.ca_file), poolSize=1)
    stub.SetSessionId(si._stub.GetSessionId())
    if lean:
        setattr(stub, deserializer.LEAN_UPDATE_SETS, UID_KEY)
    return stub


def _collector(si: Any, stub: Any) -> Any:
    """A new PropertyCollector on ``stub`` with the watch's filter (every VM, WATCH_PATHS)."""
    root_pc: Any = vmodl.query.PropertyCollector(si.content.propertyCollector._moId, stub)
    collector = root_pc.CreatePropertyCollector()
    root: Any = vim.Folder(si.content.rootFolder._moId, stub)
    collector.CreateFilter(PC.FilterSpec(objectSet=[PC.ObjectSpec(obj=root, skip=False, selectSet=vm_traversal())],
                                         propSet=[PC.PropertySpec(type=vim.VirtualMachine, pathSet=WATCH_PATHS)]),
                           partialUpdates=False)
    return collector


def _seen(update: Any) -> dict[str, tuple[str, str | None, str | None, bool, tuple[str, ...]]]:
    """moref -> (kind, banlieue.uid, instance UUID, template, changed paths): what the watch reads."""
    out = {}
    for fs in update.filterSet or []:
        for oc in fs.objectSet or []:
            uid = iu = None
            template = False
            for ch in oc.changeSet or []:
                if ch.name == "config.extraConfig":
                    uid = next((str(o.value) for o in ch.val or [] if o.key == UID_KEY), None)
                elif ch.name == "config.instanceUuid":
                    iu = str(ch.val) if ch.val else None
                elif ch.name == "config.template":
                    template = bool(ch.val)
            out[oc.obj._moId] = (oc.kind, uid, iu, template, tuple(sorted(ch.name for ch in oc.changeSet or [])))
    return out


def test_lean_reader_reports_what_pyvmomi_reports(private_vcsim: VcsimProcess, si: Any) -> None:
    vms = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.VirtualMachine], True).view
    uids = {}
    plain_vms = [vm for vm in vms if not vm.config.template]
    for vm in plain_vms[:3]:  # some VMs carry a banlieue UID (among other extraConfig), the rest none
        uids[vm._moId] = str(uuid.uuid4())
        wait_task(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(extraConfig=[
            vim.option.OptionValue(key="guestinfo.userdata", value="I2Nsb3VkLWNvbmZpZwo="),
            vim.option.OptionValue(key=UID_KEY, value=uids[vm._moId])])))
    plain = _collector(si, _stub(private_vcsim, si, lean=False))
    lean = _collector(si, _stub(private_vcsim, si, lean=True))
    expected = plain.WaitForUpdatesEx("", PC.WaitOptions(maxWaitSeconds=5))
    got = lean.WaitForUpdatesEx("", PC.WaitOptions(maxWaitSeconds=5))
    assert isinstance(got, updateset.UpdateSet)
    assert got.version
    assert len(_seen(got)) == len(vms) >= 4
    assert any(s[3] for s in _seen(got).values())  # templates are reported too (the watch skips them)
    assert _seen(got) == _seen(expected)
    assert {ref: s[1] for ref, s in _seen(got).items() if s[1]} == uids
    # Then a change: one VM powered on is one "modify".
    wait_task(plain_vms[0].PowerOnVM_Task())
    later = lean.WaitForUpdatesEx(got.version, PC.WaitOptions(maxWaitSeconds=5))
    assert later is not None and later.version  # (vcsim answers version "-" every time)
    assert [(ref, s[0]) for ref, s in _seen(later).items()] == [(plain_vms[0]._moId, "modify")]
    # Nothing changes: the long poll times out, an empty response, None as pyVmomi returns.
    assert lean.WaitForUpdatesEx(later.version, PC.WaitOptions(maxWaitSeconds=1)) is None


def test_a_fault_is_raised_as_pyvmomi_raises_it(private_vcsim: VcsimProcess, si: Any) -> None:
    lean = _collector(si, _stub(private_vcsim, si, lean=True))
    lean.DestroyPropertyCollector()
    with pytest.raises(vmodl.fault.ManagedObjectNotFound):
        lean.WaitForUpdatesEx("", PC.WaitOptions(maxWaitSeconds=1))


def _response(n: int) -> bytes:
    """A WaitForUpdatesEx response body with ``n`` VMs entering, each with 16 KiB of user data in
    extraConfig (cloud-init user data of that size is common)."""
    blob = "A" * 16384
    objects = "".join(
        f'<objectSet><kind>enter</kind><obj type="VirtualMachine">vm-{i}</obj>'
        f'<changeSet><name>config.extraConfig</name><op>assign</op><val xsi:type="ArrayOfOptionValue">'
        f'<OptionValue xsi:type="OptionValue"><key>guestinfo.userdata</key><value xsi:type="xsd:string">{blob}</value></OptionValue>'
        f'<OptionValue xsi:type="OptionValue"><key>{UID_KEY}</key><value xsi:type="xsd:string">uid-{i}</value></OptionValue>'
        f'</val></changeSet><changeSet><name>guest.net</name><op>assign</op><val xsi:type="ArrayOfGuestNicInfo">'
        f'<GuestNicInfo xsi:type="GuestNicInfo"><network>VM Network</network><ipAddress>10.0.{i // 250}.{i % 250}</ipAddress>'
        f'<macAddress>00:50:56:00:00:01</macAddress><connected>true</connected><deviceConfigId>4000</deviceConfigId>'
        f'</GuestNicInfo></val></changeSet>'
        f'<changeSet><name>config.template</name><op>assign</op><val xsi:type="xsd:boolean">false</val></changeSet>'
        f'</objectSet>' for i in range(n))
    return ('<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
            'xmlns:xsd="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>'
            '<WaitForUpdatesExResponse xmlns="urn:vim25"><returnval><version>7</version><filterSet>'
            f'<filter type="PropertyFilter">session[x]f</filter>{objects}</filterSet></returnval>'
            '</WaitForUpdatesExResponse></soapenv:Body></soapenv:Envelope>').encode()


def test_memory_is_bounded_by_one_object_update_not_the_batch() -> None:
    body = _response(1000)  # ~17 MB
    pos = 0

    def read(n: int) -> bytes:
        nonlocal pos
        chunk = body[pos:pos + n]
        pos += len(chunk)
        return chunk

    tracemalloc.start()
    try:
        got = updateset.read_update_set(read, UID_KEY, on_fault=lambda _b: pytest.fail("not a fault"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got is not None and got.version == "7"
    updates = got.filterSet[0].objectSet
    assert [u.obj._moId for u in updates] == [f"vm-{i}" for i in range(1000)]
    assert all(u.kind == "enter" for u in updates)
    assert [u.changeSet[0].val[0].value for u in updates[:2]] == ["uid-0", "uid-1"]
    # The guest's addresses are kept as (MAC, addresses) pairs (find.VMIndex.observe applies them).
    assert updates[0].changeSet[1].name == "guest.net"
    assert updates[0].changeSet[1].val == (("00:50:56:00:00:01", ("10.0.0.0",)),)
    assert updates[0].changeSet[2].val is False
    # The lean results themselves (1,000 small updates) plus one chunk and one objectSet: far
    # below the body, let alone a tree of it (which would be several times the body).
    assert peak < len(body) / 8, (peak, len(body))
