"""SOAP responses are freed by reference counting once used (``deserializer``): no response
object waits in a reference cycle for the garbage collector. Real SOAP to vcsim."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from pyVmomi import SoapAdapter

from banlieue.backends.base import Connection
from banlieue.backends.vsphere import deserializer, find
from banlieue.backends.vsphere.backend import VSphereBackend


@pytest.fixture
def saved_cycles() -> Iterator[list[Any]]:
    """What the collector finds in reference cycles while the test runs (gc.DEBUG_SAVEALL)."""
    gc.collect()
    gc.garbage.clear()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _response_objects(garbage: list[Any]) -> list[str]:
    names = [type(o).__qualname__ for o in garbage]
    return [n for n in names if n in ("xmlparser", "SoapResponseDeserializer", "AcyclicResponseDeserializer",
                                      "SoapDeserializer") or n.startswith("vmodl.")]


async def test_scans_leave_no_response_in_a_reference_cycle(
    backend: VSphereBackend, conn: Connection, saved_cycles: list[Any]
) -> None:
    assert SoapAdapter.SoapResponseDeserializer is deserializer.AcyclicResponseDeserializer  # installed by find
    index = find.VMIndex()
    await backend.sessions.run(conn, lambda s: find.scan_uids(s.content, index))  # every VM's extraConfig
    gc.collect()
    assert _response_objects(saved_cycles) == []


async def test_pyvmomis_own_deserializer_leaves_each_response_in_a_cycle(
    backend: VSphereBackend, conn: Connection, saved_cycles: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reason for the subclass: with pyVmomi's class the same scan leaves its response to the
    # collector (if this starts failing, pyVmomi broke the cycle itself and the patch can go).
    monkeypatch.setattr(SoapAdapter, "SoapResponseDeserializer", deserializer.AcyclicResponseDeserializer.__mro__[1])
    index = find.VMIndex()
    await backend.sessions.run(conn, lambda s: find.scan_uids(s.content, index))
    gc.collect()
    assert "SoapResponseDeserializer" in _response_objects(saved_cycles)
    assert any(n.startswith("vmodl.") for n in _response_objects(saved_cycles))


def test_concurrent_full_scans_are_one_scan(vcsim_factory: Any) -> None:
    # After a restart every lookup misses the empty index at once; the callers that wait for a
    # running scan use its result instead of each scanning every VM again (find.scan_uids).
    import ssl
    import threading

    from pyVim.connect import Disconnect, SmartConnect

    vc = vcsim_factory(method_delay={"RetrievePropertiesEx": 500})  # a scan takes >= 0.5 s
    sis = [SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                        sslContext=ssl.create_default_context(cafile=vc.ca_file)) for _ in range(4)]
    index = find.VMIndex()
    start = threading.Barrier(len(sis))

    def scan(si: Any) -> None:
        si.content  # noqa: B018 - retrieve the ServiceContent before the race
        start.wait()
        find.scan_uids(si.content, index)

    try:
        threads = [threading.Thread(target=scan, args=(si,)) for si in sis]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert index.scans == 1
        find.scan_uids(sis[0].content, index)  # a later caller (none running) scans again
        assert index.scans == 2
    finally:
        for si in sis:
            Disconnect(si)
