"""Admission is the truth: config/default (minus the Deployment) applied to kube-apiserver with
``kubectl apply --server-side``, as an operator would; every CRD Established, every
ValidatingAdmissionPolicy type-checked without warnings; kubectl shows what is rejected and why.

The policies repeat CRD transition rules on purpose (banlieue/api/admission.py): with the real
CRDs installed, the CRD rule answers first (schema validation runs before validating admission),
so each policy's own message is checked on a second server whose CRDs lack those rules (a cluster
with an older or hand-edited CRD: the case the policies exist for).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from banlieue.api.admission import POLICIES as ADMISSION_POLICIES
from banlieue.api.admission import TEMPLATE_IMMUTABLE_MESSAGE
from banlieue.api.provider import ENDPOINT_MESSAGE
from banlieue.cmd.dev import find_kubectl
from banlieue.options import StartupError
from banlieue.testing.apiservers import ApiServerUnderTest, start_api_server
from banlieue.testing.envtest import Envtest, envtest_binaries_missing
from banlieue.testing.stack import REPO_ROOT


def kubectl_path() -> str | None:
    try:
        return find_kubectl()
    except StartupError:
        return None


pytestmark = [pytest.mark.kubectl,
              pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing())),
              pytest.mark.skipif(kubectl_path() is None, reason="kubectl not installed")]

NS = "admission"
POLICIES = tuple(p.name for p in ADMISSION_POLICIES)


def _provider(name: str, ca_bundle: dict[str, Any] | None = None, klass: str = "vsphere") -> dict[str, Any]:
    connection: dict[str, Any] = {"endpoint": "https://127.0.0.1:1/sdk", "credentialsRef": {"name": "creds"}}
    if ca_bundle is not None:
        connection["caBundle"] = ca_bundle
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": name, "namespace": NS},
            "spec": {"providerClassRef": {"name": klass}, "connection": connection}}


def _vm(name: str, klass: str = "small", image: str = "ubuntu-22.04") -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": NS},
            "spec": {"classRef": {"name": klass}, "imageRef": {"name": image}}}


class Kubectl:
    def __init__(self, api: ApiServerUnderTest) -> None:
        kubectl = kubectl_path()
        assert kubectl is not None
        self.kubectl, self.api = kubectl, api

    def run(self, *args: str, docs: list[dict[str, Any]] | None = None) -> subprocess.CompletedProcess[str]:
        return self.api.kubectl(self.kubectl, *args, stdin=yaml.safe_dump_all(docs) if docs is not None else None)

    def ok(self, *args: str, docs: list[dict[str, Any]] | None = None) -> str:
        proc = self.run(*args, docs=docs)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def rejected(self, *args: str, docs: list[dict[str, Any]] | None = None) -> str:
        proc = self.run(*args, docs=docs)
        assert proc.returncode != 0, f"accepted: {proc.stdout}"
        return proc.stderr


@pytest.fixture(scope="module")
def installed(envtest: Envtest) -> Kubectl:
    """The session's envtest with banlieue installed as an operator installs it."""
    api = ApiServerUnderTest("real", envtest.url, envtest.kubeconfig_path, envtest=envtest)
    k = Kubectl(api)
    api.install(k.kubectl)
    k.ok("create", "namespace", NS)
    return k


def test_every_crd_is_established_and_every_policy_type_checks(installed: Kubectl) -> None:
    crds = json.loads(installed.ok("get", "crd", "-o", "json"))["items"]
    names = {c["metadata"]["name"] for c in crds}
    assert {p.name.removesuffix(".yaml").split("_", 1)[1] + "." + p.name.split("_", 1)[0]
            for p in (REPO_ROOT / "config/crd").glob("*.yaml")} <= names
    for crd in crds:
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True", crd["metadata"]["name"]
    for name in POLICIES:
        policy = json.loads(installed.ok("get", "validatingadmissionpolicy", name, "-o", "json"))
        status = policy.get("status") or {}
        # The apiserver type-checks each expression against the CRD schema; a warning means the
        # expression refers to something the schema does not have.
        assert (status.get("typeChecking") or {}).get("expressionWarnings") in (None, []), status
        assert not [c for c in status.get("conditions") or [] if c.get("status") == "False"], status


def test_the_crd_rules_reject_first_with_their_field_path(installed: Kubectl) -> None:
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[_provider("two-cas", {
        "inline": "x", "secretRef": {"name": "ca"}})])
    assert "spec.connection.caBundle: Invalid value" in err and "exactly one of inline, configMapRef or secretRef must be set" in err, err
    # An endpoint no reconcile could use: a human message, not the raw regular expression an
    # OpenAPI pattern error quotes (new-user finding).
    ftp = _provider("ftp")
    ftp["spec"]["connection"]["endpoint"] = "ftp://127.0.0.1/sdk"
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[ftp])
    assert "spec.connection.endpoint: Invalid value" in err and ENDPOINT_MESSAGE in err, err
    assert "should match" not in err and "[hH][tT]" not in err, err
    installed.ok("apply", "--server-side", "-f", "-", docs=[_provider("p1"), _vm("vm1")])
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[_provider("p1", klass="other")])
    assert "spec.providerClassRef: Invalid value" in err and "field is immutable" in err, err
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[_vm("vm1", klass="large")])
    assert "spec.classRef: Invalid value" in err and "field is immutable" in err, err


def test_per_vm_network_settings_are_checked_at_admission(installed: Kubectl) -> None:
    """A VirtualMachine's interface overrides: addresses need a prefix length, gateways and name
    servers are IPs of the right family; kubectl names the field and says what is expected."""
    def net_vm(name: str, **iface: Any) -> dict[str, Any]:
        vm = _vm(name)
        vm["spec"]["network"] = {"interfaces": [{"name": "eth0", **iface}]}
        return vm

    installed.ok("apply", "--server-side", "-f", "-", docs=[net_vm(
        "net-ok", addresses=["10.0.0.5/24", "fd00::5/64"], gateway4="10.0.0.1", gateway6="fd00::1",
        nameservers=["10.0.0.53", "fd00::53"])])
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[net_vm("net-bad", addresses=["10.0.0.5"])])
    assert "spec.network.interfaces[0].addresses[0]: Invalid value" in err, err
    assert "must be an IP address with a prefix length (10.0.0.5/24, fd00::5/64)" in err, err
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[net_vm("net-bad", gateway4="fd00::1")])
    assert "spec.network.interfaces[0].gateway4: Invalid value" in err and "must be an IPv4 address" in err, err
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[net_vm("net-bad", nameservers=["ns1.example.com"])])
    assert "spec.network.interfaces[0].nameservers[0]: Invalid value" in err and "must be an IP address" in err, err
    # An existing VM's override is checked on update too.
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[net_vm("net-ok", addresses=["10.0.0.5/24", "bad"])])
    assert "spec.network.interfaces[0].addresses[1]: Invalid value" in err, err


def test_the_os_disk_may_be_renamed_not_moved_and_limits_hold_with_kubectl(installed: Kubectl) -> None:
    """Issue 19 (ADR 0012): the VMClass transition rule on its first disk and the vSphere limits,
    on a real kube-apiserver (which also checks the rule's CEL cost when the CRD is installed)."""
    def klass(disks: list[str], cpus: int = 1, disk_name: str | None = None) -> dict[str, Any]:
        return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "osdisk19"},
                "spec": {"hardware": {"cpus": cpus, "memoryMiB": 512, "disks": [
                    {"name": n, "sizeGiB": 10, "storageClass": "standard"} for n in disks]}}}

    installed.ok("apply", "--server-side", "-f", "-", docs=[klass(["os", "logs", "data"])])
    installed.ok("apply", "--server-side", "-f", "-", docs=[klass(["os", "data", "logs"])])  # reorder the others
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[klass(["data", "os", "logs"])])
    assert "spec.hardware: Invalid value" in err and "disks[0] is the OS disk" in err, err
    installed.ok("apply", "--server-side", "-f", "-", docs=[klass(["boot", "data", "logs"])])  # a rename
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[klass(["boot", "data", "logs"], cpus=1000)])
    assert "spec.hardware.cpus" in err and "768" in err, err
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[klass(["boot", "Data_1"])])
    assert "spec.hardware.disks[1].name" in err, err
    # Emptying the disks (or dropping the field) would pass the rule above, and so would any list
    # set afterwards: refused, so the OS disk can never be swapped through an empty list.
    for emptied in (klass([]), {**klass([]), "spec": {"hardware": {"cpus": 1, "memoryMiB": 512}}}):
        err = installed.rejected("apply", "--server-side", "-f", "-", docs=[emptied])
        assert "spec.hardware.disks: Invalid value" in err and "cannot be emptied" in err, err
    installed.ok("apply", "--server-side", "-f", "-", docs=[klass(["boot"])])  # the other disks may go
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[klass(["data", "boot"])])
    assert "disks[0] is the OS disk" in err, err


def test_vsphere_memory_ipam_and_mac_rules_are_checked_at_admission(installed: Kubectl) -> None:
    """New-user pass F5/F6: memory a multiple of 4 MiB (VMClass, VSphereMachine and its template),
    an interface's ``static`` block exactly with ``source: static``, a fixed MAC unicast with 6
    octets and, in VMware's 00:50:56 prefix, in the manual range; each with a human message."""
    def klass(name: str, memory: int = 512, ipam: dict[str, Any] | None = None) -> dict[str, Any]:
        iface: dict[str, Any] = {"name": "eth0", "networkClass": "default"}
        if ipam is not None:
            iface["ipam"] = ipam
        return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": name},
                "spec": {"hardware": {"cpus": 1, "memoryMiB": memory}, "network": {"interfaces": [iface]}}}

    def machine(name: str, memory: int = 512, mac: str | None = None, kind: str = "VSphereMachine") -> dict[str, Any]:
        device: dict[str, Any] = {"name": "eth0", "portGroup": "VM Network"}
        if mac is not None:
            device["macAddress"] = mac
        spec: dict[str, Any] = {"providerRef": {"name": "p"}, "datacenter": "DC0", "cluster": "C0",
                                "template": "t", "memoryMiB": memory, "network": {"devices": [device]}}
        if kind == "VSphereMachineTemplate":
            spec = {"template": {"spec": spec}}
        return {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": kind,
                "metadata": {"name": name, "namespace": NS}, "spec": spec}

    def apply(doc: dict[str, Any]) -> str:
        return installed.rejected("apply", "--server-side", "-f", "-", docs=[doc])

    static = {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"}
    installed.ok("apply", "--server-side", "-f", "-", docs=[
        klass("f6-ok", 1024, {"source": "static", "static": static}), klass("f6-dhcp", 2048, {"source": "dhcp"}),
        klass("f6-default", 4), machine("f5-ok", 4096, "00:50:56:3F:ff:01"), machine("f5-other-oui", mac="02:00:5e:10:00:01"),
        machine("f5-tpl", 1024, kind="VSphereMachineTemplate")])  # a template's MAC: the test below
    err = apply(klass("f6-bad", 1023))
    assert "spec.hardware.memoryMiB: Invalid value" in err and "must be a multiple of 4 MiB" in err, err
    err = apply(klass("f6-bad", ipam={"source": "static"}))
    assert "spec.network.interfaces[0].ipam: Invalid value" in err and "source static needs a static block" in err, err
    err = apply(klass("f6-bad", ipam={"source": "dhcp", "static": static}))
    assert "spec.network.interfaces[0].ipam: Invalid value" in err and "used only with source: static" in err, err
    err = apply(klass("f6-bad", ipam={"static": static}))  # source defaults to dhcp
    assert "used only with source: static" in err, err
    err = apply(machine("f6-bad", 1022))
    assert "spec.memoryMiB: Invalid value" in err and "must be a multiple of 4 MiB" in err, err
    err = apply(machine("f6-bad", 1022, kind="VSphereMachineTemplate"))
    assert "spec.template.spec.memoryMiB: Invalid value" in err and "must be a multiple of 4 MiB" in err, err
    for bad in ("zz:not:a:mac", "00:50:56:00:00", "00-50-56-00-00-01", "01:00:5e:00:00:01", "00:50:56:00:00:01:02"):
        err = apply(machine("f5-bad", mac=bad))
        assert "spec.network.devices[0].macAddress: " in err, (bad, err)
        assert "must be a unicast MAC address" in err or "Too long: may not be more than 17" in err, (bad, err)
        assert "should match" not in err, err
    err = apply(machine("f5-bad", mac="00:50:56:AA:BB:01"))
    assert "spec.network.devices[0].macAddress: Invalid value" in err, err
    assert "manual range 00:50:56:00:00:00-00:50:56:3F:FF:FF" in err, err
    err = apply(machine("f5-tpl-bad", mac="00:50:56:40:00:00", kind="VSphereMachineTemplate"))
    assert "spec.template.spec.network.devices[0].macAddress: Invalid value" in err and "manual range" in err, err


def test_what_must_pass_passes(installed: Kubectl) -> None:
    installed.ok("apply", "--server-side", "-f", "-", docs=[
        _provider("no-ca"), _provider("inline-ca", {"inline": "pem"}),
        _provider("cm-ca", {"configMapRef": {"name": "ca", "key": "ca.crt"}})])
    # Changing something else of a VM / Provider is allowed.
    installed.ok("apply", "--server-side", "-f", "-", docs=[_vm("vm2")])
    changed = _vm("vm2")
    changed["spec"]["desiredPowerState"] = "PoweredOff"
    installed.ok("apply", "--server-side", "-f", "-", docs=[changed])
    installed.ok("label", "provider", "-n", NS, "no-ca", "site=a")
    # Server-side-apply dry runs of templates, as CAPI's topology controller sends them.
    docs = [d for d in yaml.safe_load_all((REPO_ROOT / "config/samples/vspheremachinetemplates.yaml").read_text()) if d]
    docs += [d for d in yaml.safe_load_all((REPO_ROOT / "config/samples/vmclasses.yaml").read_text()) if d]
    # The VirtualMachine samples (placement selectors, anti-affinity, per-VM addresses) pass the
    # network and selector rules too.
    for sample in ("config/samples/virtualmachines.yaml", "config/samples/network/static-address.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO_ROOT / sample).read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = NS if doc["kind"] != "VMClass" else doc["metadata"].get("namespace")
        if doc["metadata"]["namespace"] is None:
            del doc["metadata"]["namespace"]
    installed.ok("apply", "--server-side", "--dry-run=server", "--field-manager=capi-topology", "-f", "-", docs=docs)
    installed.ok("apply", "--server-side", "--field-manager=capi-topology", "-f", "-", docs=docs)
    installed.ok("apply", "--server-side", "--dry-run=server", "--field-manager=capi-topology", "-f", "-", docs=docs)


def test_a_vspheremachinetemplate_spec_is_immutable(installed: Kubectl) -> None:
    """New-user finding: a VSphereMachineTemplate could be edited in place, which no machine
    follows (CAPI InfraMachineTemplates are immutable; CAPV refuses it in a webhook). A spec
    change is refused saying what to do instead; metadata, status and unchanged server-side-apply
    dry runs (CAPI's topology controller) pass."""
    template = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachineTemplate",
                "metadata": {"name": "workers-v1", "namespace": NS},
                "spec": {"template": {"spec": {"template": "ubuntu-22.04", "numCPUs": 2, "memoryMiB": 4096}}}}
    installed.ok("apply", "--server-side", "--field-manager=capi-topology", "-f", "-", docs=[template])
    edit = json.dumps({"spec": {"template": {"spec": {"numCPUs": 4}}}})
    # A policy becomes active a moment after it is created: the first dry runs may pass.
    deadline = time.monotonic() + 30
    while installed.run("patch", "vspheremachinetemplate", "-n", NS, "workers-v1", "--dry-run=server", "--type=merge",
                        "-p", edit).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    err = installed.rejected("patch", "vspheremachinetemplate", "-n", NS, "workers-v1", "--type=merge", "-p", edit)
    assert _denied("banlieue-vspheremachinetemplate-immutable-spec", TEMPLATE_IMMUTABLE_MESSAGE) in err, err
    assert "create a new VSphereMachineTemplate" in err and "MachineDeployment" in err, err
    changed = json.loads(json.dumps(template))
    changed["spec"]["template"]["spec"]["memoryMiB"] = 8192
    err = installed.rejected("apply", "--server-side", "--field-manager=capi-topology", "-f", "-", docs=[changed])
    assert "banlieue-vspheremachinetemplate-immutable-spec" in err, err
    installed.ok("apply", "--server-side", "--dry-run=server", "--field-manager=capi-topology", "-f", "-", docs=[template])
    installed.ok("apply", "--server-side", "--field-manager=capi-topology", "-f", "-", docs=[template])
    installed.ok("label", "vspheremachinetemplate", "-n", NS, "workers-v1", "tier=workers")
    installed.ok("annotate", "vspheremachinetemplate", "-n", NS, "workers-v1", "note=kept")
    installed.ok("patch", "vspheremachinetemplate", "-n", NS, "workers-v1", "--subresource=status", "--type=merge", "-p",
                 json.dumps({"status": {"capacity": {"cpu": "2", "memory": "4096Mi"}}}))
    got = json.loads(installed.ok("get", "vspheremachinetemplate", "-n", NS, "workers-v1", "-o", "json"))
    assert got["spec"]["template"]["spec"]["numCPUs"] == 2 and got["metadata"]["labels"] == {"tier": "workers"}
    installed.ok("delete", "vspheremachinetemplate", "-n", NS, "workers-v1")


@pytest.fixture(scope="module")
def without_crd_rules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    """A second envtest whose banlieue.io CRDs have no x-kubernetes-validations (the policies
    are then the only enforcement), with config/admission applied server-side."""
    tmp = tmp_path_factory.mktemp("admission-only")
    with start_api_server("real", tmp) as api:
        k = Kubectl(api)
        crds = []
        for path in sorted((REPO_ROOT / "config/crd").glob("banlieue.io_*.yaml")):
            crds.append(_strip_rules(yaml.safe_load(path.read_text())))
        k.ok("apply", "--server-side", "-f", "-", docs=crds)
        k.ok("wait", "--for=condition=Established", *[f"crd/{c['metadata']['name']}" for c in crds])
        k.ok("apply", "--server-side", "-k", str(REPO_ROOT / "config/admission"))
        k.ok("create", "namespace", NS)
        yield k


def _strip_rules(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_strip_rules(v) for v in node]
    return node


def _denied(policy: str, message: str) -> str:
    """kubectl's line for a policy denial with reason Invalid. The field path is empty (``: :``):
    a ValidatingAdmissionPolicy validation has no fieldPath (unlike a CRD rule), so each message
    names its field itself."""
    return f"is invalid: : ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: {message}"


def test_each_policy_rejects_with_its_own_message(without_crd_rules: Kubectl) -> None:
    k = without_crd_rules
    # Policies become active a moment after they are created: the first requests may pass.
    deadline = time.monotonic() + 30
    while True:
        proc = k.run("apply", "--server-side", "--dry-run=server", "-f", "-", docs=[_provider("two-cas", {
            "inline": "x", "secretRef": {"name": "ca"}})])
        if proc.returncode != 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert _denied("banlieue-provider-ca-bundle",
                   "spec.connection.caBundle: exactly one of inline, configMapRef or secretRef must be set") in proc.stderr, proc.stderr
    k.ok("apply", "--server-side", "-f", "-", docs=[_provider("p1", {"inline": "pem"}), _vm("vm1")])
    # Each policy becomes active on its own: wait for the UPDATE policies too (dry runs).
    for docs in ([_provider("p1", {"inline": "pem"}, klass="other")], [_vm("vm1", klass="large")]):
        deadline = time.monotonic() + 30
        while k.run("apply", "--server-side", "--dry-run=server", "-f", "-", docs=docs).returncode == 0 \
                and time.monotonic() < deadline:
            time.sleep(0.5)
    err = k.rejected("apply", "--server-side", "-f", "-", docs=[_provider("p1", {"inline": "pem"}, klass="other")])
    assert _denied("banlieue-provider-immutable-class", "spec.providerClassRef is immutable") in err, err
    err = k.rejected("apply", "--server-side", "-f", "-", docs=[_vm("vm1", klass="large")])
    assert _denied("banlieue-virtualmachine-immutable-refs", "spec.classRef is immutable") in err, err
    err = k.rejected("apply", "--server-side", "-f", "-", docs=[_vm("vm1", image="other")])
    assert _denied("banlieue-virtualmachine-immutable-refs", "spec.imageRef is immutable") in err, err
    # What must pass still passes: other fields, status, deletion.
    changed = _vm("vm1")
    changed["spec"]["desiredPowerState"] = "PoweredOff"
    k.ok("apply", "--server-side", "-f", "-", docs=[changed])
    k.ok("patch", "virtualmachine", "-n", NS, "vm1", "--subresource=status", "--type=merge", "-p",
         json.dumps({"status": {"conditions": []}}))
    k.ok("delete", "virtualmachine", "-n", NS, "vm1")


def _net_class(name: str, *statics: dict[str, Any] | None) -> dict[str, Any]:
    """A VMClass with one interface per entry of ``statics`` (None: DHCP), named eth0, eth1..."""
    ifaces = [{"name": f"eth{i}", "networkClass": "default",
               **({"ipam": {"source": "static", "static": s}} if s is not None else {})} for i, s in enumerate(statics)]
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": name},
            "spec": {"hardware": {"cpus": 1, "memoryMiB": 512}, "network": {"interfaces": ifaces}}}


def _net_vm(name: str, *overrides: dict[str, Any]) -> dict[str, Any]:
    vm = _vm(name)
    vm["spec"]["network"] = {"interfaces": [{"name": f"eth{i}", **o} for i, o in enumerate(overrides)]}
    return vm


def _net_machine(name: str, *devices: dict[str, Any], template: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"providerRef": {"name": "p"}, "datacenter": "DC0", "cluster": "C0", "template": "t",
                            "network": {"devices": [{"name": f"eth{i}", "portGroup": "VM Network", **d}
                                                    for i, d in enumerate(devices)]}}
    kind = "VSphereMachineTemplate" if template else "VSphereMachine"
    return {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": NS}, "spec": {"template": {"spec": spec}} if template else spec}


def test_unusable_interface_addresses_and_gateways_are_refused_at_admission(installed: Kubectl) -> None:
    """New-user finding: multicast, loopback, unspecified and link-local values were accepted as
    static addresses or gateways; so were the network or broadcast address as the host's, a
    gateway outside the interface's networks, gateway4 on an interface without IPv4, and a
    default gateway on two interfaces. Each is refused with its field path on a VMClass, a
    VirtualMachine's overrides, a VSphereMachine and its template."""
    def refused(doc: dict[str, Any], path: str, *words: str) -> None:
        err = installed.rejected("apply", "--server-side", "-f", "-", docs=[doc])
        assert f"{path}: Invalid value" in err, (path, err)
        for w in words:
            assert w in err, (w, err)

    ok4 = {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"}
    installed.ok("apply", "--server-side", "-f", "-", docs=[
        _net_class("n-ok", {"addresses": ["10.0.0.5/24", "fd00::5/64"], "gateway4": "10.0.0.1", "gateway6": "fe80::1"},
                   {"addresses": ["10.1.0.5/31", "192.168.9.255/22"]}, None),
        _net_class("n-ok32", {"addresses": ["10.0.0.5/32", "10.1.0.9/16"], "gateway4": "10.1.0.1"}),
        _net_vm("n-ok", {"addresses": ["10.0.0.6/24"], "gateway4": "10.0.0.1", "gateway6": "fd00::1"}, {"nameservers": ["10.9.0.53"]}),
        _net_machine("n-ok", {**ok4, "gateway6": "fe80::1"}, {"dhcp4": True}, {"addresses": ["10.3.0.5/24", "fd00:3::5/64"]}),
        _net_machine("n-ok-dhcp", {"gateway4": "10.2.0.1"}),
        _net_machine("n-ok-dhcp4", {"dhcp4": True, "addresses": ["fd00::5/64"], "gateway4": "10.3.0.1"}),
        _net_machine("n-ok", {"dhcp4": True, "gateway4": "10.0.0.1"}, template=True)])

    for bad, what in (("224.0.0.5/24", "multicast"), ("127.0.0.5/8", "loopback"), ("0.0.0.0/0", "unspecified"),
                      ("::/64", "unspecified"), ("::1/128", "loopback"), ("169.254.3.4/16", "link-local"),
                      ("fe80::5/64", "link-local"), ("ff02::1/64", "multicast")):
        refused(_net_class("n-bad", {"addresses": [bad]}), "spec.network.interfaces[0].ipam.static.addresses[0]",
                "must be a unicast host address", what)
    refused(_net_vm("n-bad", {"addresses": ["10.0.0.5/24", "239.1.1.1/24"]}), "spec.network.interfaces[0].addresses[1]",
            "must be a unicast host address")
    refused(_net_machine("n-bad", {"addresses": ["127.0.0.1/8"]}), "spec.network.devices[0].addresses[0]",
            "must be a unicast host address")
    refused(_net_machine("n-bad", {"addresses": ["10.0.0.5"]}), "spec.network.devices[0].addresses[0]",
            "must be an IP address with a prefix length")
    for gw in ("224.0.0.1", "127.0.0.1", "0.0.0.0", "169.254.0.1", "255.255.255.255"):
        refused(_net_class("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": gw}),
                "spec.network.interfaces[0].ipam.static.gateway4", "must be a unicast address")
    refused(_net_vm("n-bad", {"gateway6": "ff02::2"}), "spec.network.interfaces[0].gateway6", "must be a unicast address")
    refused(_net_machine("n-bad", {"gateway6": "::1", "dhcp6": True}), "spec.network.devices[0].gateway6",
            "must be a unicast address")

    # The network or broadcast address as the host's (/30 and shorter; /31 and /32 have neither).
    refused(_net_class("n-bad", {"addresses": ["10.0.0.0/24"]}), "spec.network.interfaces[0].ipam.static.addresses[0]",
            "10.0.0.0/24 is the network address of its network")
    refused(_net_vm("n-bad", {"addresses": ["192.168.9.255/24"]}), "spec.network.interfaces[0].addresses[0]",
            "192.168.9.255/24 is the broadcast address of its network")
    refused(_net_machine("n-bad", {"addresses": ["10.0.0.3/30"]}), "spec.network.devices[0].addresses[0]",
            "10.0.0.3/30 is the broadcast address")

    # A gateway outside the interface's networks of its family.
    refused(_net_class("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.1.1"}),
            "spec.network.interfaces[0].ipam.static.gateway4", "gateway4 10.0.1.1 is outside the interface's IPv4 networks")
    refused(_net_vm("n-bad", {"addresses": ["fd00::5/64"], "gateway6": "fd01::1"}),
            "spec.network.interfaces[0].gateway6", "outside the interface's IPv6 networks")
    refused(_net_machine("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": "10.9.9.9"}),
            "spec.network.devices[0].gateway4", "outside the interface's IPv4 networks")

    # A gateway that is the interface's own address, or its network's network or broadcast address.
    refused(_net_class("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.5"}),
            "spec.network.interfaces[0].ipam.static.gateway4", "gateway4 10.0.0.5 is the interface's own address")
    refused(_net_vm("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.255"}),
            "spec.network.interfaces[0].gateway4", "gateway4 10.0.0.255 is the interface's own address, or the network or broadcast")
    refused(_net_machine("n-bad", {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.0"}),
            "spec.network.devices[0].gateway4", "or the network or broadcast address of its network")
    refused(_net_machine("n-bad", {"addresses": ["fd00::5/64"], "gateway6": "fd00::5"}),
            "spec.network.devices[0].gateway6", "gateway6 fd00::5 is the interface's own address")
    installed.ok("apply", "--server-side", "-f", "-", docs=[  # /31: both addresses are hosts (RFC 3021)
        _net_machine("n-p2p", {"addresses": ["10.0.0.0/31"], "gateway4": "10.0.0.1"})])

    # gateway4 on an interface with no IPv4 (no IPv4 address, no DHCPv4).
    refused(_net_class("n-bad", {"addresses": ["fd00::5/64"], "gateway4": "10.0.0.1"}),
            "spec.network.interfaces[0].ipam.static.gateway4", "no IPv4 address")
    refused(_net_vm("n-bad", {"addresses": ["fd00::5/64"], "gateway4": "10.0.0.1"}),
            "spec.network.interfaces[0].gateway4", "no IPv4 address")
    refused(_net_machine("n-bad", {"addresses": ["fd00::5/64"], "gateway4": "10.0.0.1"}),
            "spec.network.devices[0].gateway4", "no IPv4 address")
    refused(_net_machine("n-bad", {"dhcp4": False, "gateway4": "10.0.0.1"}),
            "spec.network.devices[0].gateway4", "no IPv4 address")

    # One default route per family: gateway4 (or gateway6) on two interfaces is ambiguous.
    refused(_net_class("n-bad", ok4, {"addresses": ["10.1.0.5/24"], "gateway4": "10.1.0.1"}),
            "spec.network.interfaces", "gateway4 is set on interfaces eth0, eth1")
    refused(_net_vm("n-bad", {"gateway6": "fe80::1"}, {"gateway6": "fe80::2"}),
            "spec.network.interfaces", "gateway6 is set on interfaces eth0, eth1")
    refused(_net_machine("n-bad", {"dhcp4": True, "gateway4": "10.0.0.1"}, {"dhcp4": True, "gateway4": "10.3.0.1"},
                         template=True),
            "spec.template.spec.network.devices", "gateway4 is set on interfaces eth0, eth1")


def test_a_template_refuses_static_addresses_a_machine_keeps_them(installed: Kubectl) -> None:
    """Defect: a VSphereMachineTemplate's static addresses were copied to every VSphereMachine made
    from it, so the Machines of a MachineDeployment came up with one IP on several VMs. A
    template with ``addresses`` on any device is refused with the field and what to use instead
    (CAPV refuses ``ipAddrs`` in a template the same way); a VSphereMachine of its own keeps
    them, and a template may still set a gateway and name servers for DHCP devices."""
    dhcp = {"dhcp4": True, "gateway4": "10.0.0.1", "nameservers": ["10.0.0.53"]}
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[
        _net_machine("t-static", dhcp, {"addresses": ["10.0.0.5/24", "fd00::5/64"]}, template=True)])
    assert "spec.template.spec.network.devices: Forbidden: static addresses cannot be set in a template" in err, err
    for words in ("every VSphereMachine made from it", "dhcp4/dhcp6", "create each VSphereMachine"):
        assert words in err, (words, err)
    installed.ok("apply", "--server-side", "-f", "-", docs=[
        _net_machine("t-static", dhcp, {"dhcp6": True, "addresses": []}, template=True),
        _net_machine("m-static", {"addresses": ["10.0.0.5/24"], "gateway4": "10.0.0.1"})])


def test_invalid_label_selectors_and_topology_keys_are_refused_at_admission(installed: Kubectl) -> None:
    """New-user finding: a label selector requirement In/NotIn without values or Exists with
    values (kube-apiserver refuses those in its own selectors), an unknown operator, and an
    anti-affinity topologyKey that no failure domain label has were accepted and silently
    matched nothing (or everything)."""
    def placed(placement: dict[str, Any]) -> dict[str, Any]:
        vm = _vm("sel")
        vm["spec"]["placement"] = placement
        return vm

    def refused(doc: dict[str, Any], path: str, *words: str) -> None:
        err = installed.rejected("apply", "--server-side", "-f", "-", docs=[doc])
        assert path in err, (path, err)
        for w in words:
            assert w in err, (w, err)

    good = {"providerSelector": {"matchExpressions": [{"key": "site", "operator": "In", "values": ["a"]},
                                                       {"key": "gpu", "operator": "Exists"}]},
            "failureDomainSelector": {"matchExpressions": [{"key": "dc", "operator": "DoesNotExist", "values": []}]},
            "antiAffinity": [{"topologyKey": "cluster", "labelSelector": {"matchLabels": {"app": "db"}}},
                             {"topologyKey": "dc", "mode": "preferred"}]}
    installed.ok("apply", "--server-side", "-f", "-", docs=[placed(good)])
    refused(placed({"providerSelector": {"matchExpressions": [{"key": "site", "operator": "In"}]}}),
            "spec.placement.providerSelector.matchExpressions[0]", "In and NotIn need at least one value")
    refused(placed({"failureDomainSelector": {"matchExpressions": [{"key": "dc", "operator": "NotIn", "values": []}]}}),
            "spec.placement.failureDomainSelector.matchExpressions[0]", "In and NotIn need at least one value")
    refused(placed({"providerSelector": {"matchExpressions": [{"key": "gpu", "operator": "Exists", "values": ["x"]}]}}),
            "spec.placement.providerSelector.matchExpressions[0]", "Exists and DoesNotExist take no values")
    refused(placed({"providerSelector": {"matchExpressions": [{"key": "gpu", "operator": "Equals", "values": ["x"]}]}}),
            "spec.placement.providerSelector.matchExpressions[0].operator", "Unsupported value")
    refused(placed({"antiAffinity": [{"topologyKey": "cluster", "labelSelector": {
        "matchExpressions": [{"key": "app", "operator": "Exists", "values": ["db"]}]}}]}),
        "spec.placement.antiAffinity[0].labelSelector.matchExpressions[0]", "take no values")
    refused(placed({"antiAffinity": [{"topologyKey": "zone"}]}),
            "spec.placement.antiAffinity[0].topologyKey", "Unsupported value", '"dc"', '"cluster"')
    cluster = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereCluster",
               "metadata": {"name": "sel", "namespace": NS},
               "spec": {"providerSelector": {"matchExpressions": [{"key": "site", "operator": "In", "values": []}]}}}
    refused(cluster, "spec.providerSelector.matchExpressions[0]", "In and NotIn need at least one value")


def test_a_template_refuses_a_mac_address_a_machine_keeps_it(installed: Kubectl) -> None:
    """Defect: a VSphereMachineTemplate's ``macAddress`` was copied to every VSphereMachine made
    from it, so every Machine of a MachineDeployment after the first failed ``MacAddressConflict``
    (one MAC on two VMs). A template with ``macAddress`` on any device is refused with the field
    and what to do instead, as static addresses are; a VSphereMachine of its own keeps it."""
    err = installed.rejected("apply", "--server-side", "-f", "-", docs=[
        _net_machine("t-mac", {"dhcp4": True}, {"dhcp4": True, "macAddress": "00:50:56:00:12:34"}, template=True)])
    assert "spec.template.spec.network.devices: Forbidden: a MAC address cannot be set in a template" in err, err
    for words in ("every VSphereMachine made from it", "leave macAddress unset"):
        assert words in err, (words, err)
    installed.ok("apply", "--server-side", "-f", "-", docs=[
        _net_machine("t-mac", {"dhcp4": True}, {"dhcp4": True}, template=True),
        _net_machine("m-mac", {"dhcp4": True, "macAddress": "00:50:56:00:12:34"})])
