"""``banlieue dev vms``: what the simulated vCenters of a running ``banlieue dev`` hold.

Each simulator is found through the state directory (``<state-dir>/vcsim-<provider>/info.json``,
written by the simulator: URL, user, password, CA file) and read with pyVmomi, independently of
the manager: one ``RetrievePropertiesEx`` over a container view of every VirtualMachine. Templates
are left out. Per VM: name, power state, datacenter/cluster/host, datastores, guest IP, instance
UUID, CPUs and memory, disks (device key, label, capacity in GiB, backing file), NICs (device key,
label, MAC, network: a port group's name, a distributed one's too) and banlieue's identity keys (the ``banlieue.*`` extraConfig keys banlieue writes when it
clones, ``banlieue.uid`` first among them). VMs without such keys belong to the simulator's own
inventory (``DC0_C0_RP0_VM0``...), not to banlieue.

Output: a text block per VM, or ``--output json`` (a list of objects, one per VM, with the keys
of :func:`describe_vm`). Exit 1 with one line when no simulator is found, the dev environment is not
running ("dev is not running (no simulator at <url>); start it with `make dev`") or a simulator
cannot be read.
"""

from __future__ import annotations

import fcntl
import json
import ssl
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from banlieue.options import StartupError

IDENTITY_PREFIX = "banlieue."
"""extraConfig keys banlieue sets on the VMs it clones (backends/vsphere/find.py: ``banlieue.uid``...)."""
VM_PROPERTIES = (
    "name", "config.template", "config.instanceUuid", "config.extraConfig", "config.hardware.device",
    "config.hardware.numCPU", "config.hardware.memoryMB",
    "runtime.powerState", "runtime.host", "resourcePool", "datastore", "guest.ipAddress",
)


def dev_running(state_dir: Path) -> bool:
    """Whether a ``banlieue dev`` holds ``state_dir/dev.lock`` (its ``flock``, taken for as long
    as it runs; released by the kernel when it dies, however it dies)."""
    try:
        with (state_dir / "dev.lock").open("rb") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def not_running(info: dict[str, Any]) -> StartupError:
    """The one line for a simulator of a dev environment that is not running."""
    return StartupError(f"dev is not running (no simulator at {info.get('url')}); start it with `make dev`")


def simulators(state_dir: Path, only: str | None = None) -> dict[str, dict[str, Any]]:
    """``{provider: info}`` of the simulators whose info file is in ``state_dir`` (sorted by name).

    ``only`` keeps one Provider. Raises StartupError when none is found (dev not started with that
    state directory), ``only`` names none of them, or the dev that wrote them is not running
    (its info files stay behind when it stops).
    """
    found: dict[str, dict[str, Any]] = {}
    for info in sorted(state_dir.glob("vcsim-*/info.json")):
        try:
            found[info.parent.name.removeprefix("vcsim-")] = json.loads(info.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a simulator being restarted: its info file is rewritten
    if not found:
        raise StartupError(f"no simulator found in {state_dir} (is `make dev` running with --state-dir {state_dir}?)")
    if only is not None:
        if only not in found:
            raise StartupError(f"no simulator for --vcenter {only} in {state_dir}: there are {', '.join(found)}")
        found = {only: found[only]}
    if not dev_running(state_dir):
        raise not_running(next(iter(found.values())))
    return found


@contextmanager
def connect(info: dict[str, Any]) -> Iterator[Any]:
    """A pyVmomi ServiceInstance logged in to the simulator of ``info`` (TLS verified against its
    CA); logged out on exit. Raises StartupError when the simulator does not answer."""
    from pyVim import connect as pyvim_connect

    pyvim: Any = pyvim_connect  # pyVmomi's partial stubs
    context = ssl.create_default_context(cafile=info["ca_file"]) if info.get("tls") else None
    try:
        si = pyvim.SmartConnect(host=info["host"], port=int(info["port"]), user=info["username"],
                                pwd=info["password"], sslContext=context,
                                protocol="https" if info.get("tls") else "http", connectionPoolTimeout=-1)
    except ConnectionRefusedError:
        raise not_running(info) from None  # dev stopped after its lock was checked
    except Exception as exc:  # TLS, login: one line for the user
        raise StartupError(f"cannot connect to {info.get('url')}: {type(exc).__name__}: {exc}") from None
    try:
        yield si
    finally:
        pyvim.Disconnect(si)


def _path_up(obj: Any, kind: str) -> Any:
    """The nearest ancestor of ``obj`` of vim type ``kind`` (e.g. ``Datacenter``), or None."""
    while obj is not None:
        obj = getattr(obj, "parent", None)
        if obj is not None and type(obj).__name__.endswith(kind):
            return obj
    return None


def describe_vm(props: dict[str, Any], portgroups: dict[str, str] | None = None) -> dict[str, Any]:
    """One VM's record from its retrieved properties (:data:`VM_PROPERTIES`); ``portgroups`` maps
    a distributed port group's key (``dvportgroup-12``) to its name, what a NIC's backing names
    (:func:`portgroup_names`).

    Keys: ``name``, ``cpus`` (``config.hardware.numCPU``), ``memoryMiB``
    (``config.hardware.memoryMB``: vSphere's "MB" are MiB), ``powerState``, ``datacenter``, ``cluster`` (the owner of the VM's resource
    pool, where banlieue placed it; None for a standalone host's pool), ``host`` (``runtime.host``:
    in the simulator a clone stays on its template's host, a standalone one, since vcsim picks no
    host in the cluster as DRS would), ``datastores`` (names), ``ip`` (guest.ipAddress or None), ``instanceUuid``,
    ``disks`` (``key``, ``label``, ``capacityGiB``, ``file``), ``nics`` (``key``, ``label``,
    ``mac``, ``network``), ``identity`` (the ``banlieue.*`` extraConfig keys and values).
    """
    from pyVmomi import vim

    host = props.get("runtime.host")
    compute = getattr(props.get("resourcePool"), "owner", None)
    disks, nics = [], []
    for device in props.get("config.hardware.device") or []:
        label = getattr(getattr(device, "deviceInfo", None), "label", "")
        if isinstance(device, vim.vm.device.VirtualDisk):
            disks.append({"key": device.key, "label": label,
                          "capacityGiB": round((device.capacityInKB or 0) / 1024 / 1024, 2),
                          "file": getattr(device.backing, "fileName", "")})
        elif isinstance(device, vim.vm.device.VirtualEthernetCard):
            backing: Any = device.backing
            network = getattr(getattr(backing, "network", None), "name", None) or getattr(backing, "deviceName", None)
            if network is None and hasattr(backing, "port"):
                key = backing.port.portgroupKey
                # The port group's name, as vSphere's client shows it; its key when it is unknown.
                network = (portgroups or {}).get(key) or f"dvportgroup {key}"
            nics.append({"key": device.key, "label": label, "mac": device.macAddress, "network": network})
    identity = {o.key: str(o.value) for o in props.get("config.extraConfig") or [] if o.key.startswith(IDENTITY_PREFIX)}
    return {
        "name": props.get("name"),
        "cpus": props.get("config.hardware.numCPU"),
        "memoryMiB": props.get("config.hardware.memoryMB"),
        "powerState": str(props.get("runtime.powerState") or ""),
        "datacenter": getattr(_path_up(compute or host, "Datacenter"), "name", None),
        "cluster": compute.name if isinstance(compute, vim.ClusterComputeResource) else None,
        "host": getattr(host, "name", None),
        "datastores": [ds.name for ds in props.get("datastore") or []],
        "ip": props.get("guest.ipAddress") or None,
        "instanceUuid": props.get("config.instanceUuid"),
        "disks": disks,
        "nics": nics,
        "identity": dict(sorted(identity.items())),
    }


def _retrieve(content: Any, kind: Any, paths: list[str]) -> list[dict[str, Any]]:
    """``paths`` of every object of vim type ``kind`` under the root folder, one
    ``RetrievePropertiesEx`` over a container view (then its continuation pages)."""
    from pyVmomi import vim
    from pyVmomi import vmodl as _vmodl

    vmodl: Any = _vmodl  # pyVmomi's partial stubs: untyped constructors
    view = content.viewManager.CreateContainerView(content.rootFolder, [kind], True)
    try:
        spec = vmodl.query.PropertyCollector.FilterSpec(
            objectSet=[vmodl.query.PropertyCollector.ObjectSpec(
                obj=view, skip=True,
                selectSet=[vmodl.query.PropertyCollector.TraversalSpec(
                    name="view", path="view", skip=False, type=vim.view.ContainerView)])],
            propSet=[vmodl.query.PropertyCollector.PropertySpec(type=kind, pathSet=paths)],
        )
        result = content.propertyCollector.RetrievePropertiesEx([spec], vmodl.query.PropertyCollector.RetrieveOptions())
        objects = list(result.objects) if result else []
        while result is not None and result.token:
            result = content.propertyCollector.ContinueRetrievePropertiesEx(result.token)
            objects.extend(result.objects)
    finally:
        view.DestroyView()
    return [{p.name: p.val for p in obj.propSet} for obj in objects]


def portgroup_names(content: Any) -> dict[str, str]:
    """``{key: name}`` of every distributed port group (``dvportgroup-12`` -> ``DC0_DVPG0``)."""
    from pyVmomi import vim

    return {str(pg["key"]): str(pg["name"]) for pg in _retrieve(content, vim.dvs.DistributedVirtualPortgroup, ["key", "name"])
            if pg.get("key") and pg.get("name")}


def list_vms(si: Any) -> list[dict[str, Any]]:
    """Every VM (templates excluded) of the ServiceInstance ``si``, sorted by datacenter and name."""
    from pyVmomi import vim

    content = si.RetrieveContent()
    portgroups = portgroup_names(content)
    vms = []
    for props in _retrieve(content, vim.VirtualMachine, list(VM_PROPERTIES)):
        if props.get("config.template"):
            continue
        vms.append(describe_vm(props, portgroups))
    return sorted(vms, key=lambda v: (v["datacenter"] or "", v["name"] or ""))


def render(vcenter: str, url: str, vms: list[dict[str, Any]], out: IO[str]) -> None:
    """The text form: one header line per simulator, then a block per VM."""
    owned = sum(1 for vm in vms if vm["identity"])
    out.write(f"{vcenter} ({url}): {len(vms)} VMs, {owned} cloned by banlieue\n")
    for vm in vms:
        where = "/".join(str(x) for x in (vm["datacenter"], vm["cluster"] or "(standalone)"))
        memory = f"{vm['memoryMiB']}MiB" if vm.get("memoryMiB") is not None else "-"
        out.write(f"  {vm['name']}  {vm['powerState']}  cpus={vm.get('cpus') or '-'}  memory={memory}  {where}  "
                  f"host={vm['host']}  datastores={','.join(vm['datastores'])}  ip={vm['ip'] or '-'}\n")
        out.write(f"    instanceUuid {vm['instanceUuid']}\n")
        for disk in vm["disks"]:
            out.write(f"    disk {disk['key']} {disk['label']!r} {disk['capacityGiB']:g} GiB {disk['file']}\n")
        for nic in vm["nics"]:
            out.write(f"    nic  {nic['key']} {nic['label']!r} mac {nic['mac']} network {nic['network']}\n")
        for key, value in vm["identity"].items():
            out.write(f"    {key} = {value}\n")
    out.flush()


def main(state_dir: Path, vcenter: str | None = None, output: str = "text", out: IO[str] | None = None) -> int:
    """List the VMs of the dev simulators found in ``state_dir``; returns 0.

    Raises StartupError (one line, exit 1) when no simulator is found or one cannot be read.
    """
    out = out or sys.stdout
    records: list[dict[str, Any]] = []
    for name, info in simulators(state_dir, vcenter).items():
        with connect(info) as si:
            vms = list_vms(si)
        if output == "json":
            records.extend({"vcenter": name, **vm} for vm in vms)
        else:
            render(name, str(info.get("url")), vms, out)
    if output == "json":
        json.dump(records, out, indent=2)
        out.write("\n")
    return 0
