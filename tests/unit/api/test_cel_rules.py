"""CEL rules (CRD x-kubernetes-validations and ValidatingAdmissionPolicies) evaluated with cel-python.

The API-server double does not run CEL, so the rules' semantics are checked here, on the exact
strings crdgen and the admission renderer emit. Skipped when cel-python is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from banlieue.api import admission, crdgen
from banlieue.api.kinds import resource_kinds

celpy = pytest.importorskip("celpy")
ENV = celpy.Environment()


def evaluate(expr: str, **activation: Any) -> bool:
    program = ENV.program(ENV.compile(expr))
    return bool(program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()}))


def _rules(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if not isinstance(node, dict):
        return
    for rule in node.get("x-kubernetes-validations", []):
        yield path, rule["rule"]
    for key, sub in node.get("properties", {}).items():
        yield from _rules(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _rules(node["items"], f"{path}[]")


ALL_RULES = sorted({(f"{k.kind}{p}", r) for k in resource_kinds() for p, r in _rules(crdgen.openapi_schema(k))})


def test_expected_rules_are_present() -> None:
    paths = {p for p, _ in ALL_RULES}
    assert {
        "Provider.spec.providerClassRef",
        "Provider.spec.connection.caBundle",
        "VirtualMachine.spec.classRef",
        "VirtualMachine.spec.imageRef",
        "Provider.spec.capabilities.storageClasses[].target",
        "Provider.spec.capabilities.networkClasses[].target",
        "VSphereMachine.spec.network.devices[]",
        "VSphereMachine.spec.disks[]",
    } <= paths


@pytest.mark.parametrize(("path", "rule"), ALL_RULES, ids=[p for p, _ in ALL_RULES])
def test_every_rule_compiles(path: str, rule: str) -> None:
    ENV.compile(rule)


ONE_OF = {
    "inline": {"inline": "PEM"},
    "configMapRef": {"configMapRef": {"name": "c", "key": "ca.crt"}},
    "secretRef": {"secretRef": {"name": "s", "key": "ca.crt"}},
}


@pytest.mark.parametrize(
    ("bundle", "ok"),
    [
        pytest.param(ONE_OF["inline"], True, id="inline"),
        pytest.param(ONE_OF["configMapRef"], True, id="configmap"),
        pytest.param(ONE_OF["secretRef"], True, id="secret"),
        pytest.param({}, False, id="none"),
        pytest.param({**ONE_OF["inline"], **ONE_OF["secretRef"]}, False, id="two"),
        pytest.param({**ONE_OF["inline"], **ONE_OF["secretRef"], **ONE_OF["configMapRef"]}, False, id="three"),
    ],
)
def test_ca_bundle_one_of(bundle: dict[str, Any], ok: bool) -> None:
    crd_rule = next(r for p, r in ALL_RULES if p == "Provider.spec.connection.caBundle")
    assert evaluate(crd_rule, self=bundle) is ok
    provider = {"spec": {"connection": {"endpoint": "e", "caBundle": bundle}}}
    assert evaluate(admission.CA_BUNDLE_ONE_OF, object=provider) is ok


def test_ca_bundle_policy_allows_no_bundle() -> None:
    assert evaluate(admission.CA_BUNDLE_ONE_OF, object={"spec": {"connection": {"endpoint": "e"}}})


@pytest.mark.parametrize(
    ("old", "new", "ok"),
    [
        pytest.param({"name": "small"}, {"name": "small"}, True, id="unchanged"),
        pytest.param({"name": "small"}, {"name": "medium"}, False, id="changed"),
    ],
)
def test_immutable_refs(old: dict[str, str], new: dict[str, str], ok: bool) -> None:
    for path in ("VirtualMachine.spec.classRef", "VirtualMachine.spec.imageRef", "Provider.spec.providerClassRef"):
        rule = next(r for p, r in ALL_RULES if p == path)
        assert evaluate(rule, self=new, oldSelf=old) is ok
    vm_old = {"spec": {"classRef": old, "imageRef": old}}
    vm_new = {"spec": {"classRef": new, "imageRef": new}}
    policy = next(p for p in admission.POLICIES if p.name == "banlieue-virtualmachine-immutable-refs")
    for validation in policy.validations:
        assert evaluate(validation.expression, object=vm_new, oldObject=vm_old) is ok
    pol = next(p for p in admission.POLICIES if p.name == "banlieue-provider-immutable-class")
    assert evaluate(pol.validations[0].expression, object={"spec": {"providerClassRef": new}},
                    oldObject={"spec": {"providerClassRef": old}}) is ok


@pytest.mark.parametrize(("new", "ok"), [
    pytest.param({"template": "ubuntu", "numCPUs": 2}, True, id="unchanged"),
    pytest.param({"template": "ubuntu", "numCPUs": 4}, False, id="changed"),
])
def test_vspheremachinetemplate_spec_is_immutable(new: dict[str, Any], ok: bool) -> None:
    """CAPI InfraMachineTemplates are immutable; labels and the rest of the metadata are not compared."""
    policy = next(p for p in admission.POLICIES if p.name == "banlieue-vspheremachinetemplate-immutable-spec")
    assert policy.operations == ("UPDATE",)
    old_obj = {"metadata": {"labels": {}}, "spec": {"template": {"spec": {"template": "ubuntu", "numCPUs": 2}}}}
    new_obj = {"metadata": {"labels": {"tier": "workers"}}, "spec": {"template": {"spec": new}}}
    [validation] = policy.validations
    assert evaluate(validation.expression, object=new_obj, oldObject=old_obj) is ok


@pytest.mark.parametrize(
    ("path", "value", "ok"),
    [
        ("Provider.spec.capabilities.storageClasses[].target", {"datastore": "d"}, True),
        ("Provider.spec.capabilities.storageClasses[].target", {"datastoreCluster": "p"}, True),
        ("Provider.spec.capabilities.storageClasses[].target", {"datastore": "d", "datastoreCluster": "p"}, False),
        ("Provider.spec.capabilities.storageClasses[].target", {}, False),
        ("Provider.spec.capabilities.networkClasses[].target", {"portGroup": "pg"}, True),
        ("Provider.spec.capabilities.networkClasses[].target", {"portGroup": "a", "distributedPortGroup": "b"}, False),
        ("VSphereMachine.spec.network.devices[]", {"name": "eth0", "networkClass": "default"}, True),
        ("VSphereMachine.spec.network.devices[]", {"name": "eth0", "portGroup": "VM Network"}, True),
        ("VSphereMachine.spec.network.devices[]", {"name": "eth0"}, False),
        ("VSphereMachine.spec.network.devices[]", {"name": "eth0", "portGroup": "a", "networkClass": "b"}, False),
        ("VSphereMachine.spec.disks[]", {"name": "os", "sizeGiB": 1}, True),
        ("VSphereMachine.spec.disks[]", {"name": "os", "sizeGiB": 1, "datastore": "d", "storageClass": "s"}, False),
    ],
)
def test_one_of_rules(path: str, value: dict[str, Any], ok: bool) -> None:
    # The one-of rule of the path (a network device also has its address and gateway rules).
    rule = next(r for p, r in ALL_RULES if p == path and "gateway" not in r)
    assert evaluate(rule, self=value) is ok
