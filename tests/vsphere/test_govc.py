"""``bin/govc`` (``make govc``) against a simulator, as docs/operations.md uses it: it lists what
pyVmomi sees, and a VM the product made reads back with the product's UUID and MACs."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from typing import Any

import pytest
from pyVmomi import vim

from banlieue.backends.base import Connection, NicSpec, VMSpec
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.testing.vcsim import VcsimProcess, VcsimUnavailable, govc_binary

pytestmark = [pytest.mark.vcsim, pytest.mark.timeout(120)]


def govc(vc: VcsimProcess, *args: str) -> str:
    try:
        binary = govc_binary()
    except VcsimUnavailable as exc:
        pytest.skip(str(exc))
    proc = subprocess.run([str(binary), *args], env={**os.environ, **vc.govc_env}, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def inventory_paths(si: Any) -> set[str]:
    """Every VM's and template's inventory path, walked through pyVmomi."""
    paths: set[str] = set()

    def walk(folder: Any, prefix: str) -> None:
        for child in folder.childEntity:
            if isinstance(child, vim.Folder):
                walk(child, f"{prefix}/{child.name}")
            elif isinstance(child, vim.VirtualMachine):
                paths.add(f"{prefix}/{child.name}")

    for dc in si.content.rootFolder.childEntity:
        walk(dc.vmFolder, f"/{dc.name}/vm")
    return paths


async def test_govc_lists_the_simulators_vms_and_reads_a_product_vm(
    backend: VSphereBackend, conn: Connection, vcsim: VcsimProcess, si: Any
) -> None:
    uid = str(uuid.uuid4())
    result = await backend.create_vm(conn, VMSpec(
        uid=uid, name="seen-by-govc", datacenter="DC1", cluster="DC1_C2", template="ubuntu-22.04", num_cpus=1,
        memory_mib=256, nics=(NicSpec("eth0", "VM Network"),)))
    listed = set(govc(vcsim, "find", "/", "-type", "m").split())
    assert "/DC1/vm/seen-by-govc" in listed and "/DC0/vm/ubuntu-22.04" in listed
    assert listed == inventory_paths(si)

    [path] = govc(vcsim, "find", "/", "-type", "m", "-name", "seen-by-govc").split()
    [info] = json.loads(govc(vcsim, "vm.info", "-json", path))["virtualMachines"]
    assert info["config"]["uuid"] == result.vm.bios_uuid
    assert info["config"]["instanceUuid"] == result.vm.instance_uuid
    assert [n["macAddress"] for n in info["guest"]["net"]] == [n.mac_address for n in result.vm.nics]
