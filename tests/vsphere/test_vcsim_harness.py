"""The vcsim harness itself: inventory, login, TLS with the generated CA, method delays."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable

import pytest
from pyVim.connect import Disconnect, SmartConnect
from pyVmomi import vim

from banlieue.testing.vcsim import VcsimProcess

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(60)]


def _connect(vc: VcsimProcess, password: str | None = None) -> vim.ServiceInstance:
    ctx = ssl.create_default_context(cafile=vc.ca_file)
    return SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=password or vc.password, sslContext=ctx)


def test_default_inventory_has_two_datacenters_three_clusters_and_templates(vcsim: VcsimProcess) -> None:
    si = _connect(vcsim)
    try:
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.ClusterComputeResource], True)
        clusters = sorted(c.name for c in view.view)
        view.Destroy()
        assert clusters == [f"DC{d}_C{c}" for d in range(2) for c in range(3)]
        assert vcsim.info["clusters"] == {f"DC{d}": [f"DC{d}_C{c}" for c in range(3)] for d in range(2)}
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        templates = [vm for vm in view.view if vm.config.template]
        view.Destroy()
        assert sorted(t.name for t in templates) == ["ubuntu-22.04", "ubuntu-22.04"]
    finally:
        Disconnect(si)


def test_wrong_password_is_refused(vcsim: VcsimProcess) -> None:
    with pytest.raises(vim.fault.InvalidLogin):
        _connect(vcsim, password="not-the-password")


def test_extra_datastores_portgroups_and_plain_http(vcsim_factory: Callable[..., VcsimProcess]) -> None:
    vc = vcsim_factory(dc=1, cluster=1, tls=False, datastores=["fast-ds"], portgroups=["pg-web"])
    assert vc.url.startswith("http://")
    assert vc.ca_file == ""
    assert "fast-ds" in vc.info["datastores"]["DC0"]
    assert "pg-web" in vc.info["networks"]["DC0"]
    si = SmartConnect(protocol="http", host=vc.host, port=vc.port, user=vc.username, pwd=vc.password)
    try:
        names = {ds.name for ds in si.content.rootFolder.childEntity[0].datastore}
        assert names == {"LocalDS_0", "fast-ds"}
    finally:
        Disconnect(si)


def test_method_delay_applies_to_the_named_method_only(vcsim_factory: Callable[..., VcsimProcess]) -> None:
    vc = vcsim_factory(dc=1, cluster=1, method_delay={"CurrentTime": 1500})
    si = _connect(vc)
    try:
        start = time.monotonic()
        si.CurrentTime()
        delayed = time.monotonic() - start
        start = time.monotonic()
        si.RetrieveContent()
        plain = time.monotonic() - start
        assert delayed >= 1.4
        assert plain < delayed
    finally:
        Disconnect(si)
