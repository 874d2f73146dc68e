"""Figures 4-5 of ``bench/e2e.py`` (``manager_memory_<n>``, ``cold_start_<n>``) without cloning n
VMs through banlieue.

How the n objects are made, so the manager's caches hold n *consistent* Ready VMs:

1. two vcsims start with their model VMs (``--vm``, ``--autostart``: n/2 powered-on VMs each,
   made by vcsim at start-up in seconds);
2. ``banlieue manager`` provisions one real VM per Provider (``tmpl-<provider>``); its
   VirtualMachine and VSphereMachine, as banlieue wrote them, are the templates; the manager stops;
3. for each model VM: the VirtualMachine and VSphereMachine are POSTed to the double (template
   spec, labels, finalizers, owner reference), then their status is written with the template's
   status in which the template VM's name, UUIDs, moref and IP are replaced by this VM's; the
   vcsim VM gets the matching extraConfig ``banlieue.uid``, name, CPU/memory of the class and a
   guest IP (vcsim's ``SET.guest.ipAddress``), as if banlieue had cloned it;
4. the manager starts again: ``cold_start`` = process start to ``/readyz`` 200; then it
   reconciles all 2n objects (each VSphereMachine looked up in vCenter); once its work queues
   are empty, ``manager_memory`` = its RSS. The writes it made meanwhile are reported (0 means
   the objects were as banlieue itself would have left them).
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import e2e_env
from e2e_env import MANAGER_ARGS, NS, VMS, VSMS, Env, cpu_seconds, http, metric_sum, rss_mib, vm_doc
from e2e_load import ReadyWatch, requests_by, writes

PROVIDER_NAMES = ("vcenter-a", "vcenter-b")
POOLS_PER_VCSIM = 8  # 2 datacenters x (3 clusters + 1 standalone host), one resource pool each


def _connect(vc: Any) -> Any:
    from pyVim.connect import SmartConnect

    return SmartConnect(host=vc.host, port=vc.port, user=vc.username, pwd=vc.password,
                        sslContext=ssl.create_default_context(cafile=vc.ca_file), connectionPoolTimeout=60)


def model_vms(vc: Any) -> list[dict[str, Any]]:
    """Powered-on, non-template vcsim VMs without ``banlieue.uid``: {obj, name, uuid, iuuid, moref}."""
    from pyVmomi import vim, vmodl

    si = _connect(vc)
    content = si.RetrieveContent()
    view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
    pc = vmodl.query.PropertyCollector
    spec = pc.FilterSpec(
        objectSet=[pc.ObjectSpec(obj=view, skip=True, selectSet=[
            pc.TraversalSpec(name="view", path="view", skip=False, type=vim.view.ContainerView)])],
        propSet=[pc.PropertySpec(type=vim.VirtualMachine, pathSet=[
            "name", "config.uuid", "config.instanceUuid", "config.template", "config.extraConfig"])])
    out = []
    for r in content.propertyCollector.RetrieveContents([spec]):
        p = {x.name: x.val for x in r.propSet}
        if p.get("config.template") or any(o.key == "banlieue.uid" for o in p.get("config.extraConfig") or []):
            continue
        out.append({"obj": r.obj, "name": p["name"], "uuid": p["config.uuid"], "iuuid": p["config.instanceUuid"],
                    "moref": r.obj._moId})
    view.Destroy()
    return sorted(out, key=lambda v: v["name"])


def _template_ids(vm: dict[str, Any], vsm: dict[str, Any]) -> dict[str, str]:
    st = vsm["status"]
    return {"uuid": st["biosUUID"], "iuuid": st["instanceUUID"], "moref": st.get("vmRef") or "",
            "ip": (st.get("addresses") or [{}])[0].get("address", ""), "name": vm["metadata"]["name"]}


def _substitute(obj: Any, pairs: list[tuple[str, str]]) -> Any:
    text = json.dumps(obj)
    for old, new in pairs:
        if old:
            text = text.replace(old, new)
    return json.loads(text)


def _generation(template: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    """The template's observedGeneration values -> the new object's generation (the template's
    spec was written more often than the copy's)."""
    old, now = template["metadata"].get("generation", 1), new["metadata"].get("generation", 1)
    return [(f'"observedGeneration": {old}', f'"observedGeneration": {now}')]


async def _post(s: aiohttp.ClientSession, url: str, body: Any) -> dict[str, Any]:
    async with s.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"}) as r:
        if r.status != 201:
            raise RuntimeError(f"POST {url}: {r.status} {(await r.text())[:300]}")
        out: dict[str, Any] = await r.json()
        return out


async def _status(s: aiohttp.ClientSession, url: str, status: Any) -> None:
    async with s.patch(url + "/status", data=json.dumps({"status": status}),
                       headers={"Content-Type": "application/merge-patch+json"}) as r:
        if r.status != 200:
            raise RuntimeError(f"PATCH {url}/status: {r.status} {(await r.text())[:300]}")


async def make_objects(env: Env, templates: dict[str, tuple[dict[str, Any], dict[str, Any], str]],
                       vms: dict[str, list[dict[str, Any]]], concurrency: int = 32) -> list[tuple[Any, dict[str, Any]]]:
    """POST the VM + VSphereMachine pair (and their status) for every model VM; returns
    (vcsim VM, vcsim reconfigure info) pairs for :func:`claim_vms`."""
    jobs: list[tuple[str, int, dict[str, Any]]] = [(p, i, v) for p, lst in vms.items() for i, v in enumerate(lst)]
    out: list[tuple[Any, dict[str, Any]]] = []
    queue: asyncio.Queue[tuple[str, int, dict[str, Any]]] = asyncio.Queue()
    for j in jobs:
        queue.put_nowait(j)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:
        async def worker() -> None:
            while not queue.empty():
                provider, i, mv = queue.get_nowait()
                vm_t, vsm_t, vc_name_t = templates[provider]
                ids = _template_ids(vm_t, vsm_t)
                name = f"bulk-{provider[-1]}-{i:05d}"
                ip = f"10.{100 + PROVIDER_NAMES.index(provider)}.{i // 250}.{i % 250 + 2}"
                vc_name = vc_name_t.replace(ids["name"], name)
                pairs = [(ids["uuid"], mv["uuid"]), (ids["iuuid"], mv["iuuid"]), (vc_name_t, vc_name),
                         (ids["name"], name), (ids["ip"], ip)]
                if ids["moref"]:
                    pairs.append((f'"{ids["moref"]}"', f'"{mv["moref"]}"'))
                vm_body = vm_doc(name)
                vm_body["spec"] = vm_t["spec"]
                vm_body["metadata"]["finalizers"] = vm_t["metadata"].get("finalizers")
                vm_body["metadata"]["labels"] = _substitute(vm_t["metadata"].get("labels"), pairs)
                vm = await _post(s, env.url + VMS.format(ns=NS), vm_body)
                await _status(s, env.url + VMS.format(ns=NS) + "/" + name,
                              _substitute(vm_t["status"], pairs + _generation(vm_t, vm)))
                vsm_body = {"apiVersion": vsm_t["apiVersion"], "kind": vsm_t["kind"], "metadata": {
                    "name": name, "namespace": NS, "labels": _substitute(vsm_t["metadata"].get("labels"), pairs),
                    "annotations": _substitute(vsm_t["metadata"].get("annotations"), pairs),
                    "finalizers": vsm_t["metadata"].get("finalizers"),
                    "ownerReferences": [{**ref, "name": name, "uid": vm["metadata"]["uid"]}
                                        for ref in vsm_t["metadata"].get("ownerReferences") or []]},
                    "spec": _substitute(vsm_t["spec"], pairs)}
                vsm = await _post(s, env.url + VSMS.format(ns=NS), vsm_body)
                await _status(s, env.url + VSMS.format(ns=NS) + "/" + name,
                              _substitute(vsm_t["status"], pairs + _generation(vsm_t, vsm)))
                out.append((mv["obj"], {"uid": vsm["metadata"]["uid"], "name": vc_name, "ip": ip, "hostname": name,
                                        "provider": provider, "template_uid": vsm_t["metadata"]["uid"],
                                        "template_hostname": ids["name"]}))
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def claim_vms(pairs: list[tuple[Any, dict[str, Any]]], cpus: int, memory_mib: int, boot: tuple[str, bool],
              guest: dict[str, dict[str, str]], threads: int = 8) -> None:
    """Reconfigure each vcsim VM as banlieue's clone would have left it (blocking, threaded):
    name, CPU, memory, ``boot`` = (firmware, EFI secure boot) of the template VMs banlieue made,
    the UID key, the guest IP, and ``guest[provider]`` = that provider's template VM's NIC labels
    and cloud-init guestinfo with the template's UID, host name and MAC replaced by the copy's
    (vcsim's model VMs boot with bios and carry neither: a copy left so is reconfigured, and
    reported FirmwareChangeRefused, at the very cold start the figures measure)."""
    from pyVmomi import vim

    firmware, secure = boot

    def labels(vm: Any, info: dict[str, Any]) -> list[Any]:
        extra = guest[info["provider"]]
        macs = [d.macAddress for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard)]
        template_macs = [v for k, v in sorted(extra.items()) if k.startswith("banlieue.nic.")]
        subs = [(info["template_uid"], info["uid"]), (info["template_hostname"], info["hostname"])]
        subs += [(old.lower(), new.lower()) for old, new in zip(template_macs, macs, strict=False)]
        out = []
        for key, value in extra.items():
            if key == NETWORK:
                continue
            if key.startswith("banlieue.nic."):
                value = macs[template_macs.index(value)]
            elif key == "guestinfo.metadata" and extra.get("guestinfo.metadata.encoding") == "base64":
                # banlieue writes sorted JSON, base64 (backends.vsphere.guestinfo): the same here.
                value = base64.b64encode(json.dumps(_substitute(json.loads(base64.b64decode(value)), subs),
                                                    sort_keys=True).encode()).decode()
            out.append(vim.option.OptionValue(key=key, value=value))
        return out

    def nic(vm: Any, info: dict[str, Any]) -> list[Any]:
        # vcsim's model VMs sit on a distributed port group; banlieue's clones on the template's.
        name, moref = guest[info["provider"]][NETWORK].rsplit(":", 1)
        card = next(d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard))
        card.backing = vim.vm.device.VirtualEthernetCard.NetworkBackingInfo(deviceName=name, network=vim.Network(moref, vm._stub))
        return [vim.vm.device.VirtualDeviceSpec(operation="edit", device=card)]

    def one(item: tuple[Any, dict[str, Any]]) -> None:
        vm, info = item
        spec = vim.vm.ConfigSpec(name=info["name"], numCPUs=cpus, memoryMB=memory_mib, firmware=firmware,
                                 deviceChange=nic(vm, info),
                                 bootOptions=vim.vm.BootOptions(efiSecureBootEnabled=secure), extraConfig=[
            vim.option.OptionValue(key="banlieue.uid", value=info["uid"]),
            vim.option.OptionValue(key="SET.guest.ipAddress", value=info["ip"]), *labels(vm, info)])
        task = vm.ReconfigVM_Task(spec=spec)
        while task.info.state not in ("success", "error"):
            time.sleep(0.01)
        if task.info.state == "error":
            raise RuntimeError(f"reconfigure {info['name']}: {task.info.error}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, pairs))


def queues_empty(env: Env) -> bool:
    """Every controller work queue empty and no worker busy (from /metrics)."""
    text = env.metrics()
    return bool(text) and metric_sum(text, "workqueue_depth") == 0 and \
        metric_sum(text, "controller_runtime_active_workers") == 0


def scale_point(work: Path, n: int, entries: list[dict[str, Any]], record: Any) -> dict[str, Any]:
    """Memory and cold start with ``n`` VirtualMachines + ``n`` VSphereMachines (see module doc)."""
    per_vcsim = n // 2
    # vcsim builds n/2 powered-on VMs before it reports: about 40 s for 5,000 on two loaded cores.
    opts = {"vm": -(-per_vcsim // POOLS_PER_VCSIM), "autostart": True, "startup_timeout": max(30.0, n / 50)}
    with Env(work / f"scale-{n}", vcsim_opts={p: opts for p in PROVIDER_NAMES}, manager_args=MANAGER_ARGS,
             guests="poll") as env:  # only banlieue's VMs get IPs: the n model VMs get theirs from claim_vms
        env.install_fixtures()
        env.start_manager()
        env.wait_ready()

        async def templates_run() -> None:
            watch = ReadyWatch(env.url, VMS.format(ns=NS))
            await watch.start()
            for p in PROVIDER_NAMES:
                http("POST", env.url + VMS.format(ns=NS), vm_doc(f"tmpl-{p}", p))
            if not await watch.wait_ready({f"tmpl-{p}" for p in PROVIDER_NAMES}, 120):
                raise RuntimeError(f"template VMs not Ready: {env.log_tail()}")
            await watch.stop()

        asyncio.run(templates_run())
        if env.guest_net is not None:
            env.guest_net.stop()  # the copies get their IPs from claim_vms; no DHCP polling meanwhile
        time.sleep(2.0)
        env.stop_manager()
        templates = {}
        boots = set()
        guest = {}
        for p in PROVIDER_NAMES:
            _, vm_t = http("GET", env.url + VMS.format(ns=NS) + f"/tmpl-{p}")
            _, vsm_t = http("GET", env.url + VSMS.format(ns=NS) + f"/tmpl-{p}")
            vc_name, boot, guest[p] = _vcsim_vm(env.vcsims[p], vsm_t["status"]["instanceUUID"])
            templates[p] = (vm_t, vsm_t, vc_name)
            boots.add(boot)
        if len(boots) != 1:
            raise RuntimeError(f"the template VMs boot differently: {sorted(boots)}")
        t0 = time.monotonic()
        models = {p: model_vms(env.vcsims[p])[:per_vcsim] for p in PROVIDER_NAMES}
        pairs = asyncio.run(make_objects(env, templates, models))
        claim_vms(pairs, cpus=1, memory_mib=16, boot=boots.pop(), guest=guest)
        setup_s = time.monotonic() - t0
        total = 2 * (len(pairs) + len(PROVIDER_NAMES))
        since = time.time()
        env.start_manager()
        assert env.manager is not None
        samples: list[tuple[float, float]] = []  # (seconds since start, RSS MiB) every 0.5 s
        sampler = threading.Thread(target=_sample_rss, args=(env.manager.pid, env.manager_started, samples), daemon=True)
        sampler.start()
        cold = env.wait_ready()
        rss_ready = rss_mib(env.manager.pid)
        # Settled: every queue empty and no worker busy, twice in a row 1 s apart.
        deadline = time.monotonic() + 600
        calm = 0
        while calm < 2 and time.monotonic() < deadline:
            calm = calm + 1 if queues_empty(env) else 0
            time.sleep(1.0)
        settle = time.monotonic() - env.manager_started
        assert env.manager is not None
        rss = rss_mib(env.manager.pid)
        if e2e_env.MEMPROBE:
            env.manager.process.send_signal(signal.SIGUSR1)
            time.sleep(30.0)
        cpu = cpu_seconds(env.manager.pid)
        soap = env.soap_requests()
        log = env.request_log(since)
        w = writes(log)
        vm_count = len(pairs) + len(PROVIDER_NAMES)
        peak = max(samples, default=(0.0, 0.0), key=lambda x: x[1])
        half = next((t for t, r in samples if r >= rss_ready / 2), None)
        record(entries, f"manager_memory_{vm_count}", rss, "MiB RSS", 300.0, "floor (MiB)",
               peak_rss_mib=round(peak[1], 1), peak_at_s=round(peak[0], 1),
               rss_half_of_readyz_at_s=None if half is None else round(half, 1),
               objects=total, virtual_machines=vm_count, rss_at_readyz_mib=round(rss_ready, 1),
               settle_seconds=round(settle, 1), setup_seconds=round(setup_s, 1),
               writes_after_start=dict(sorted(w.items())), soap_requests_after_start=soap,
               manager_cpu_seconds=round(cpu, 1), method="objects made from banlieue-written templates (bench/e2e_bulk.py)")
        record(entries, f"cold_start_{vm_count}", cold, "s to /readyz 200", settle,
               "s until every work queue is empty (all objects reconciled once)", objects=total,
               virtual_machines=vm_count, requests=dict(sorted(requests_by(log).items())))
        return {"rss": rss, "cold": cold, "settle": settle}


def _sample_rss(pid: int, started: float, out: list[tuple[float, float]]) -> None:
    """Append (seconds since ``started``, RSS MiB) of ``pid`` every 0.5 s until it exits."""
    while True:
        try:
            out.append((time.monotonic() - started, rss_mib(pid)))
        except OSError:
            return
        if len(out) > 4000:
            return
        time.sleep(0.5)


NETWORK = "network"
"""Key of ``_vcsim_vm``'s extra that names the template VM NIC's port group (not an extraConfig key)."""


def _vcsim_vm(vc: Any, instance_uuid: str) -> tuple[str, tuple[str, bool], dict[str, str]]:
    """Name, (firmware, EFI secure boot) and NIC-label and guestinfo extraConfig of the VM with
    ``instance_uuid``."""
    si = _connect(vc)
    vm = si.content.searchIndex.FindByUuid(None, instance_uuid, True, True)
    secure = bool(vm.config.bootOptions and vm.config.bootOptions.efiSecureBootEnabled)
    extra = {str(o.key): str(o.value) for o in vm.config.extraConfig or []
             if str(o.key).startswith(("banlieue.nic.", "guestinfo."))}
    # The port group of its (first) NIC, as "network:<name>:<moref>", beside the labels.
    from pyVmomi import vim
    card = next(d for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualEthernetCard))
    extra[NETWORK] = f"{card.backing.deviceName}:{card.backing.network._moId}"
    return str(vm.name), (str(vm.config.firmware), secure), extra
