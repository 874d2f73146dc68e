"""Models: wire names, defaults, bounds, enums, round trips (SPEC §1-§3)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from banlieue.api import core, infrastructure
from banlieue.api.kinds import dump_object, kind_info, parse_object, resource_kinds
from banlieue.api.meta import LabelSelector
from banlieue.api.provider import ENDPOINT_MESSAGE, ENDPOINT_PATTERN
from banlieue.testing.apiserver.selectors import parse_label_selector

REPO = Path(__file__).resolve().parents[3]

VM: dict[str, Any] = {
    "apiVersion": "banlieue.io/v1alpha1",
    "kind": "VirtualMachine",
    "metadata": {
        "name": "web-1",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "42",
        "generation": 2,
        "managedFields": [{"manager": "kubectl"}],
        "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u", "controller": True}],
    },
    "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu-22.04"}},
}


def test_virtual_machine_defaults_and_unknown_fields_ignored() -> None:
    vm = core.VirtualMachine.from_wire(VM)
    assert vm.spec.desired_power_state is core.PowerState.POWERED_ON
    assert vm.spec.migration_policy is core.MigrationPolicy.MANUAL  # the safe default (ADR 0012)
    assert vm.status is None
    wire = vm.to_wire()
    assert "managedFields" not in wire["metadata"]
    assert wire["spec"] == {
        "classRef": {"name": "small"},
        "imageRef": {"name": "ubuntu-22.04"},
        "desiredPowerState": "PoweredOn",
        "migrationPolicy": "manual",
    }
    assert wire["metadata"]["ownerReferences"][0]["apiVersion"] == "v1"


@pytest.mark.parametrize(
    ("model", "raw", "path", "value"),
    [
        pytest.param(core.VMClassSpec, {"hardware": {"cpus": 1, "memoryMiB": 1}}, ("firmware",), "efi", id="firmware-efi"),
        pytest.param(core.VMImageSpec, {}, ("guestAgent",), "cloud-init", id="guest-agent-cloud-init"),
        pytest.param(core.VMImageSpec, {}, ("architecture",), "amd64", id="architecture-amd64"),
        pytest.param(
            core.ProviderConnection, {"endpoint": "e", "credentialsRef": {"name": "s"}}, ("insecureSkipTLSVerify",), False,
            id="insecure-false",
        ),
        pytest.param(core.CABundle, {"configMapRef": {"name": "c"}}, ("configMapRef", "key"), "ca.crt", id="ca-key"),
        pytest.param(core.UserData, {"secretRef": {"name": "s"}}, ("key",), "user-data", id="userdata-key"),
        pytest.param(core.ClassDisk, {"name": "os", "sizeGiB": 20, "storageClass": "gold"}, ("provisioning",), "thin", id="disk-thin"),
        pytest.param(core.IPAM, {}, ("source",), "dhcp", id="ipam-dhcp"),
        pytest.param(core.AntiAffinityTerm, {"topologyKey": "dc"}, ("mode",), "required", id="anti-affinity-required"),
        pytest.param(infrastructure.VSphereMachineSpec, {}, ("powerState",), "PoweredOn", id="vsm-power-on"),
        pytest.param(infrastructure.VSphereMachineSpec, {}, ("powerOffMode",), "trySoft", id="vsm-try-soft"),
        pytest.param(infrastructure.VSphereMachineSpec, {}, ("cloneMode",), "fullClone", id="vsm-full-clone"),
        pytest.param(infrastructure.SecretKeyReference, {"name": "b"}, ("key",), "value", id="bootstrap-key-value"),
    ],
)
def test_defaults(model: Any, raw: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = model.from_wire(raw).to_wire()
    for key in path:
        node = node[key]
    assert node == value


@pytest.mark.parametrize(
    ("model", "raw"),
    [
        pytest.param(core.Hardware, {"cpus": 0, "memoryMiB": 1}, id="cpus-ge-1"),
        pytest.param(core.Hardware, {"cpus": 1, "memoryMiB": 0}, id="memory-ge-1"),
        pytest.param(core.ClassDisk, {"name": "d", "sizeGiB": 0, "storageClass": "s"}, id="disk-size-ge-1"),
        pytest.param(core.ClassDisk, {"name": "d", "sizeGiB": 1, "storageClass": "s", "provisioning": "lazy"}, id="bad-provisioning"),
        pytest.param(core.VMClassSpec, {"hardware": {"cpus": 1, "memoryMiB": 1}, "firmware": "uefi"}, id="bad-firmware"),
        pytest.param(core.VMImageSpec, {"architecture": "x86"}, id="bad-architecture"),
        pytest.param(core.VirtualMachineSpec, {"classRef": {"name": "a"}}, id="image-ref-required"),
        pytest.param(
            core.VirtualMachineSpec,
            {"classRef": {"name": "a"}, "imageRef": {"name": "b"}, "desiredPowerState": "On"},
            id="bad-power-state",
        ),
        pytest.param(infrastructure.VSphereMachineSpec, {"numCPUs": 0}, id="vsm-cpus-ge-1"),
        pytest.param(infrastructure.VSphereMachineSpec, {"powerOffMode": "gentle"}, id="bad-power-off-mode"),
        pytest.param(infrastructure.VSphereClusterSpec, {"controlPlaneEndpoint": {"host": "h", "port": 70000}}, id="port-range"),
        pytest.param(core.ImageSource, {"providerClass": "vsphere", "kind": "OVA", "ref": "x"}, id="source-kind-template"),
    ],
)
def test_bounds_and_enums_rejected(model: Any, raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.from_wire(raw)


@pytest.mark.parametrize(
    ("model", "raw"),
    [
        pytest.param(core.FailureDomainCapacity, {"cpuMHz": 1, "memoryMiB": 2, "storageGiB": 3}, id="capacity"),
        pytest.param(core.ProviderConnection, {"endpoint": "e", "credentialsRef": {"name": "s"}, "insecureSkipTLSVerify": True}, id="tls"),
        pytest.param(
            infrastructure.VSphereMachineStatus,
            {"instanceUUID": "i", "biosUUID": "b", "vmRef": "vm-1", "failureDomain": "fd", "initialization": {"provisioned": True}},
            id="vsm-status",
        ),
        pytest.param(infrastructure.VSphereMachineSpec, {"providerID": "vsphere://x", "numCPUs": 2, "memoryMiB": 4096,
                                                        "numCoresPerSocket": 1, "guestSoftPowerOffTimeoutSeconds": 60,
                                                        "cloneMode": "linkedClone", "powerState": "PoweredOff",
                                                        "powerOffMode": "hard"}, id="vsm-spec"),
        pytest.param(infrastructure.VSphereMachineTemplateStatus,
                     {"capacity": {"cpu": 2, "memory": "4Gi"}, "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"}},
                     id="vsmt-status"),
        pytest.param(core.VirtualMachineStatus, {"providerID": "vsphere://x", "observedPowerState": "PoweredOn",
                                                 "infrastructureRef": {"apiGroup": "infrastructure.banlieue.io",
                                                                       "kind": "VSphereMachine", "name": "a"}}, id="vm-status"),
    ],
)
def test_wire_names_round_trip(model: Any, raw: dict[str, Any]) -> None:
    assert model.from_wire(raw).to_wire() == raw


def test_snake_case_population_by_name() -> None:
    spec = infrastructure.VSphereMachineSpec(num_cpus=2, memory_mib=2048, provider_id="vsphere://a")
    assert spec.to_wire()["numCPUs"] == 2 and spec.to_wire()["memoryMiB"] == 2048
    assert spec.to_wire()["providerID"] == "vsphere://a"


def test_every_kind_parses_and_dumps_through_kind_metadata() -> None:
    minimal_spec: dict[str, dict[str, Any]] = {
        "Provider": {"providerClassRef": {"name": "vsphere"}, "connection": {"endpoint": "e", "credentialsRef": {"name": "s"}}},
        "VMClass": {"hardware": {"cpus": 1, "memoryMiB": 512}},
        "VMImage": {},
        "VirtualMachine": {"classRef": {"name": "a"}, "imageRef": {"name": "b"}},
        "VSphereMachine": {},
        "VSphereMachineTemplate": {"template": {"spec": {}}},
        "VSphereCluster": {},
        "VSphereClusterTemplate": {"template": {"spec": {}}},
    }
    for info in resource_kinds():
        raw = {"apiVersion": info.api_version, "kind": info.kind, "metadata": {"name": "x"}, "spec": minimal_spec[info.kind]}
        obj = parse_object(raw)
        assert isinstance(obj, info.model)
        assert dump_object(obj)["kind"] == info.kind
        lst = info.list_model.from_wire({"items": [raw]})
        assert lst.to_wire()["kind"] == info.list_kind
    with pytest.raises(KeyError):
        parse_object({"apiVersion": "v1", "kind": "Pod"})
    with pytest.raises(KeyError):
        kind_info("VirtualMachine", "infrastructure.banlieue.io")


@pytest.mark.parametrize(
    ("selector", "labels", "want"),
    [
        pytest.param({}, {"a": "1"}, True, id="empty-matches-all"),
        pytest.param({"matchLabels": {"dc": "dc0"}}, {"dc": "dc0", "x": "y"}, True, id="match-labels"),
        pytest.param({"matchLabels": {"dc": "dc0"}}, {"dc": "dc1"}, False, id="match-labels-miss"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "In", "values": ["a", "b"]}]}, {"dc": "b"}, True, id="in"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "In", "values": ["a"]}]}, {}, False, id="in-absent"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "NotIn", "values": ["a"]}]}, {}, True, id="notin-absent"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "NotIn", "values": ["a"]}]}, {"dc": "a"}, False, id="notin"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "Exists"}]}, {"dc": ""}, True, id="exists"),
        pytest.param({"matchExpressions": [{"key": "dc", "operator": "DoesNotExist"}]}, {"dc": ""}, False, id="does-not-exist"),
    ],
)
def test_label_selector_matches(selector: dict[str, Any], labels: dict[str, str], want: bool) -> None:
    assert LabelSelector.from_wire(selector).matches(labels) is want


@pytest.mark.parametrize("endpoint", ["vc", "vc.example:443", "https://127.0.0.1:8989/sdk", "HTTPS://vc/sdk", "[::1]:443", "https://[::1]/sdk",
                                      "vc:1", "vc:65535", "vc:9", "vc:60000"])
def test_provider_endpoint_forms_accepted(endpoint: str) -> None:
    core.ProviderConnection.model_validate({"endpoint": endpoint, "credentialsRef": {"name": "s"}})


@pytest.mark.parametrize("endpoint", ["ftp://127.0.0.1/sdk", "not a url", "https://", "https://vc /sdk", "FTP://vc",
                                      "https://127.0.0.1:99999/sdk", "vc:65536", "vc:0", "vc:00443"])
def test_provider_endpoint_that_no_reconcile_could_use_is_refused(endpoint: str) -> None:
    """A new user's ``ftp://`` Provider got no status at all (the controller raised at every
    reconcile): the schema refuses it at admission instead, the CRD carrying the same pattern."""
    with pytest.raises(ValidationError, match="endpoint must be a host name or IP address"):
        core.ProviderConnection.model_validate({"endpoint": endpoint, "credentialsRef": {"name": "s"}})
    doc = yaml.safe_load((REPO / "config/crd/banlieue.io_providers.yaml").read_text(encoding="utf-8"))
    props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    field = props["spec"]["properties"]["connection"]["properties"]["endpoint"]
    # A CEL rule with a human message, not an OpenAPI pattern (kubectl printed the raw regular
    # expression: new-user finding); the rule's expression is the same regular expression.
    assert "pattern" not in field
    [rule] = field["x-kubernetes-validations"]
    assert rule["message"] == ENDPOINT_MESSAGE and "(?" not in rule["message"]
    regex = rule["rule"].removeprefix("self.matches(r'").removesuffix("')")
    assert regex == ENDPOINT_PATTERN and re.search(regex, endpoint) is None


def test_label_selector_format_is_kubectl_syntax() -> None:
    sel = LabelSelector.from_wire(
        {
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["b", "a"]},
                {"key": "gone", "operator": "DoesNotExist"},
                {"key": "gpu", "operator": "Exists"},
                {"key": "env", "operator": "NotIn", "values": ["dev"]},
            ],
        }
    )
    assert sel.format() == "app=shop,env notin (dev),!gone,gpu,tier=web,zone in (a,b)"
    assert LabelSelector.from_wire({}).format() == "<none>"


_sel_key = st.sampled_from(["a", "b", "zone", "x.io/k"])
_sel_value = st.sampled_from(["1", "2", "dc0"])


@given(
    st.dictionaries(_sel_key, _sel_value, max_size=2),
    st.lists(
        st.tuples(_sel_key, st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]), st.lists(_sel_value, min_size=1, max_size=2)),
        max_size=3,
    ),
    st.dictionaries(_sel_key, _sel_value, max_size=4),
)
def test_label_selector_format_parses_back_to_the_same_meaning(
    match_labels: dict[str, str], exprs: list[tuple[str, str, list[str]]], labels: dict[str, str]
) -> None:
    """The printed form, read by an independent parser of kubectl's syntax (the API double's
    ``labels.Parse``), selects exactly what the selector does."""
    wire: dict[str, Any] = {"matchLabels": match_labels, "matchExpressions": [
        {"key": k, "operator": op, **({"values": vals} if op in ("In", "NotIn") else {})} for k, op, vals in exprs
    ]}
    sel = LabelSelector.from_wire(wire)
    text = sel.format()
    parsed = parse_label_selector("" if text == "<none>" else text)
    assert parsed.matches(labels) == sel.matches(labels)
