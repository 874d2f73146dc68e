"""Bad input (issue 10, sixth bullet).

- hypothesis-generated invalid specs sent to the API (the CRD schemas of config/crd, enforced by
  the API double as kube-apiserver does) and a few through kubectl: 422 ``Invalid`` naming the
  field path of the fault;
- names with unicode, ``/``, upper case or over 253 characters: rejected by name validation;
- missing and malformed Secrets and CA bundles, missing user data, oversized user data: every
  case gets a condition with a reason and an actionable message (manager + vcsim).

Each reconciler's ``decide`` already has a hypothesis "never raises" test in tests/unit/reconcilers
(provider, vmimage, virtualmachine, vspheremachine, vspherecluster, vspheremachinetemplate).
"""

from __future__ import annotations

import base64
import copy
import random
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from banlieue.cmd.dev import find_kubectl
from banlieue.options import StartupError
from banlieue.testing.apiserver.fixture import ApiServerProcess, start_subprocess

from .harness import (
    CORE,
    NS,
    PROVIDERS,
    REPO,
    SECRETS,
    VMS,
    VSMS,
    ChaosEnv,
    condition,
    http,
    wait_for,
)

pytestmark = [pytest.mark.timeout(120)]

VM = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": "v", "namespace": NS},
      "spec": {"classRef": {"name": "tiny"}, "imageRef": {"name": "ubuntu-22.04"}}}
VMCLASS = {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMClass", "metadata": {"name": "c"},
           "spec": {"hardware": {"cpus": 1, "memoryMiB": 64,
                                 "disks": [{"name": "os", "sizeGiB": 10, "storageClass": "standard"}]},
                    "network": {"interfaces": [{"name": "eth0", "networkClass": "default"}]}}}
PROVIDER = {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": "p", "namespace": NS},
            "spec": {"providerClassRef": {"name": "vsphere"},
                     "connection": {"endpoint": "https://vc.example:443/sdk", "credentialsRef": {"name": "s"}}}}
PATHS = {"VirtualMachine": VMS, "VMClass": f"{CORE}/vmclasses", "Provider": PROVIDERS}
_not_string = st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2))
_not_int = st.one_of(st.text(max_size=5), st.booleans(), st.floats(allow_nan=False, allow_infinity=False)
                     .filter(lambda f: not f.is_integer()))
_bad_enum = st.text(max_size=12)
_bad_device_name = st.one_of(
    st.text(min_size=1, max_size=20).filter(lambda t: any(not (c.isascii() and (c.islower() or c.isdigit() or c == "-")) for c in t)),
    st.sampled_from(["-os", "os-", "a" * 64, "OS", "os.data", "os_data", "os disk"]),
)

# (kind, field path, where to put the value, strategy of bad values): each value breaks the schema.
MUTATIONS: list[tuple[str, str, tuple[Any, ...], st.SearchStrategy[Any]]] = [
    ("VirtualMachine", "spec.desiredPowerState", ("spec", "desiredPowerState"),
     _bad_enum.filter(lambda s: s not in ("PoweredOn", "PoweredOff", "Suspended"))),
    ("VirtualMachine", "spec.migrationPolicy", ("spec", "migrationPolicy"),
     _bad_enum.filter(lambda s: s not in ("automatic", "manual", "never"))),
    ("VirtualMachine", "spec.classRef.name", ("spec", "classRef", "name"), _not_string),
    ("VirtualMachine", "spec.paused", ("spec", "paused"), st.one_of(st.text(max_size=4), st.integers())),
    ("VMClass", "spec.hardware.cpus", ("spec", "hardware", "cpus"), st.one_of(st.integers(max_value=0), _not_int)),
    ("VMClass", "spec.hardware.memoryMiB", ("spec", "hardware", "memoryMiB"), st.one_of(st.integers(max_value=0), _not_int)),
    ("VMClass", "spec.hardware.disks[0].sizeGiB", ("spec", "hardware", "disks", 0, "sizeGiB"), st.integers(max_value=0)),
    ("VMClass", "spec.hardware.disks[0].provisioning", ("spec", "hardware", "disks", 0, "provisioning"),
     _bad_enum.filter(lambda s: s not in ("thin", "thick", "eagerZeroed"))),
    # Issue 19: a typo'd class reserved every domain; names are kept in extraConfig keys.
    ("VMClass", "spec.hardware.cpus", ("spec", "hardware", "cpus"), st.integers(min_value=769)),
    ("VMClass", "spec.hardware.memoryMiB", ("spec", "hardware", "memoryMiB"), st.integers(min_value=24 * 1024 * 1024 + 1)),
    ("VMClass", "spec.hardware.disks[0].sizeGiB", ("spec", "hardware", "disks", 0, "sizeGiB"), st.integers(min_value=62 * 1024 + 1)),
    ("VMClass", "spec.hardware.disks[0].name", ("spec", "hardware", "disks", 0, "name"), _bad_device_name),
    ("VMClass", "spec.network.interfaces[0].name", ("spec", "network", "interfaces", 0, "name"), _bad_device_name),
    ("VMClass", "spec.firmware", ("spec", "firmware"), _bad_enum.filter(lambda s: s not in ("bios", "efi", "efi-secure"))),
    ("VMClass", "spec.network.interfaces[0].mtu", ("spec", "network", "interfaces", 0, "mtu"),
     st.one_of(st.integers(max_value=67), st.integers(min_value=65536))),
    ("Provider", "spec.connection.insecureSkipTLSVerify", ("spec", "connection", "insecureSkipTLSVerify"),
     st.one_of(st.text(max_size=4), st.integers())),
    ("Provider", "spec.connection.caBundle", ("spec", "connection", "caBundle"),
     st.sampled_from([{}, {"inline": "x", "configMapRef": {"name": "c"}},
                      {"inline": "x", "secretRef": {"name": "s"}, "configMapRef": {"name": "c"}}])),
]
BASES = {"VirtualMachine": VM, "VMClass": VMCLASS, "Provider": PROVIDER}


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServerProcess]:
    with start_subprocess(crd_dir=REPO / "config/crd") as proc:
        yield proc


def _mutated(kind: str, where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASES[kind])
    node: Any = body
    for key in where[:-1]:
        node = node[key] if not isinstance(key, str) or key in node else node.setdefault(key, {})
    node[where[-1]] = value
    return body


def _fields(out: Any) -> list[str]:
    return [str(c.get("field")) for c in ((out or {}).get("details") or {}).get("causes") or []]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_invalid_specs_rejected_with_field_paths(api: ApiServerProcess, data: st.DataObject) -> None:
    kind, field, where, values = data.draw(st.sampled_from(MUTATIONS), label="mutation")
    value = data.draw(values, label="value")
    status, out = http("POST", api.url + PATHS[kind], _mutated(kind, where, value))
    assert status == 422, f"{kind} with {field}={value!r} answered {status}: {out}"
    assert out["reason"] == "Invalid" and out["message"]
    fields = _fields(out)
    assert any(f == field or f.startswith(field) for f in fields), f"{field}={value!r}: causes name {fields}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.one_of(
    st.text(min_size=1, max_size=20).filter(lambda s: any(not (c.isascii() and (c.isalnum() or c in "-.")) for c in s)),
    st.builds(lambda a, b: f"{a}/{b}", st.text(max_size=5), st.text(max_size=5)),
    st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1, max_size=10),
    st.just("a" * 254),
))
def test_bad_names_rejected(api: ApiServerProcess, name: str) -> None:
    body = copy.deepcopy(VM)
    body["metadata"]["name"] = name
    status, out = http("POST", api.url + VMS, body)
    # A name the URL cannot carry (``/``) may also be refused by the router; never created.
    assert status in (400, 404, 405, 422), f"name {name!r} answered {status}: {out}"
    if status == 422:
        assert "metadata.name" in _fields(out) or "metadata.name" in str(out.get("message")), out
    listed = http("GET", api.url + VMS)[1]
    assert name not in {v["metadata"]["name"] for v in listed["items"]}


def test_the_os_disk_may_be_renamed_but_not_moved(api: ApiServerProcess) -> None:
    """Issue 19 / ADR 0012: the first disk of a class is the OS disk (the image's boot disk). A
    rename is accepted (the backend moves the name to the same disk); making another disk first,
    or moving the OS disk down the list, is refused at admission with a message saying why;
    reordering the other disks is accepted."""
    body = copy.deepcopy(VMCLASS)
    body["metadata"]["name"] = "osdisk"
    body["spec"]["hardware"]["disks"] = [{"name": n, "sizeGiB": 10, "storageClass": "standard"} for n in ("os", "logs", "data")]
    url = api.url + PATHS["VMClass"]
    assert http("POST", url, body)[0] == 201

    def put(names: list[str]) -> tuple[int, Any]:
        current = http("GET", f"{url}/osdisk")[1]
        current["spec"]["hardware"]["disks"] = [{"name": n, "sizeGiB": 10, "storageClass": "standard"} for n in names]
        return http("PUT", f"{url}/osdisk", current)

    assert put(["os", "data", "logs"])[0] == 200  # reorder of the others
    for names in (["data", "os", "logs"], ["boot", "os", "logs"], ["logs", "data"]):
        status, out = put(names)
        assert status == 422, (names, status, out)
        assert "disks[0] is the OS disk" in out["message"] and "spec.hardware" in _fields(out), out
    assert put(["boot", "data", "logs"])[0] == 200  # a rename in place
    assert [d["name"] for d in http("GET", f"{url}/osdisk")[1]["spec"]["hardware"]["disks"]] == ["boot", "data", "logs"]
    # Emptied (which would let the next edit put another disk first): refused, the field named.
    status, out = put([])
    assert status == 422 and "cannot be emptied" in out["message"] and "spec.hardware.disks" in _fields(out), out


KUBECTL_CASES = [
    ("VirtualMachine", ("spec", "desiredPowerState"), "Off", "spec.desiredPowerState"),
    ("VMClass", ("spec", "hardware", "cpus"), 0, "spec.hardware.cpus"),
    ("Provider", ("spec", "connection", "caBundle"), {"inline": "x", "configMapRef": {"name": "c"}},
     "spec.connection.caBundle"),
]


@pytest.mark.kubectl
def test_invalid_specs_through_kubectl(api: ApiServerProcess) -> None:
    try:
        kubectl = find_kubectl()
    except StartupError as err:
        pytest.skip(str(err))
    for kind, where, value, field in KUBECTL_CASES:
        doc = yaml.safe_dump(_mutated(kind, where, value))
        proc = subprocess.run([kubectl, "--kubeconfig", str(api.kubeconfig_path), "apply", "--validate=false", "-f", "-"],
                              input=doc, capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode != 0, f"kubectl accepted {kind} with {field}={value!r}"
        assert "is invalid" in proc.stderr and field in proc.stderr, proc.stderr


# --- references: Secrets, CA bundles, user data -----------------------------------------------

GARBAGE_PEM = "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n"


def _secret(env: ChaosEnv, name: str, data: dict[str, str]) -> None:
    env.create(SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                         "stringData": data})


@pytest.mark.vcsim
def test_bad_references_become_conditions(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.add_vcenter("vc")
    env.start_guest_network()
    env.add_shared_objects()
    env.add_provider("good", vc)
    _secret(env, "no-password", {"username": "user"})
    _secret(env, "no-ca-key", {"other": "x"})
    _secret(env, "no-user-data-key", {"other": "x"})

    def provider(name: str, **connection: Any) -> None:
        env.create(PROVIDERS, {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider",
                               "metadata": {"name": name, "namespace": NS, "labels": {"bad": "yes"}},
                               "spec": {"providerClassRef": {"name": "vsphere"},
                                        "connection": {"endpoint": vc.url, "credentialsRef": {"name": "good-credentials"},
                                                       "caBundle": {"inline": vc.proc.ca_pem}, **connection}}})

    provider("secret-missing", credentialsRef={"name": "absent"})
    provider("secret-invalid", credentialsRef={"name": "no-password"})
    provider("ca-garbage", caBundle={"inline": GARBAGE_PEM})
    provider("ca-configmap-missing", caBundle={"configMapRef": {"name": "absent"}})
    provider("ca-secret-key-missing", caBundle={"secretRef": {"name": "no-ca-key"}})
    env.start_banlieue("manager", log_level="debug")
    on_good = {"placement": {"providerSelector": {"matchExpressions": [{"key": "bad", "operator": "DoesNotExist"}]}}}
    env.create(VMS, env.vm_body("user-data-missing", userData={"secretRef": {"name": "absent"}}, **on_good))
    env.create(VMS, env.vm_body("user-data-key-missing", userData={"secretRef": {"name": "no-user-data-key"}}, **on_good))
    expected_providers = {
        # Issue 23 case 8: the message names the spec field at fault, never the Secret's name or keys.
        "secret-missing": ("SecretMissing", "spec.connection.credentialsRef"),
        "secret-invalid": ("SecretInvalid", "password"),
        "ca-garbage": ("TLSVerifyFailed", "caBundle"),
        "ca-configmap-missing": ("SecretMissing", "spec.connection.caBundle.configMapRef"),
        "ca-secret-key-missing": ("SecretInvalid", "spec.connection.caBundle.secretRef"),
    }

    def providers_report() -> dict[str, dict[str, Any]] | None:
        got = {p["metadata"]["name"]: condition(p, "Ready") for p in env.items(PROVIDERS)}
        return got if all(got.get(n, {}).get("reason") not in (None, "") for n in expected_providers) else None

    got = wait_for("a Ready condition on every bad Provider", providers_report, 45)
    for name, (reason, hint) in expected_providers.items():
        ready = got[name]
        assert ready["status"] == "False", (name, ready)
        assert reason is None or ready["reason"] == reason, (name, ready)
        assert hint in ready["message"], f"{name}: message does not say what to fix: {ready['message']!r}"
    for vm, hint in (("user-data-missing", "absent"), ("user-data-key-missing", "user-data")):
        def reported(vm: str = vm) -> dict[str, Any] | None:
            ready = condition(env.get(f"{VMS}/{vm}"), "Ready")
            return ready if ready.get("reason") == "WaitingForBootstrapData" else None

        ready = wait_for(f"{vm}: Ready=False WaitingForBootstrapData", reported, 45)
        assert ready["status"] == "False" and hint in ready["message"], ready
        vsm = condition(env.get(f"{VSMS}/{vm}"), "Ready")
        assert vsm.get("reason") == "WaitingForBootstrapData" and hint in vsm.get("message", ""), vsm
    with vc.oracle() as oracle:
        assert not oracle.managed(), "a VM was cloned without its user data"


@pytest.mark.vcsim
def test_oversized_user_data_is_a_condition(chaos_env: ChaosEnv) -> None:
    env = chaos_env
    vc = env.add_vcenter("vc")
    env.start_guest_network()
    env.add_shared_objects()
    env.add_provider("vc", vc)
    # Incompressible (base64 of random bytes): user data that fits once gzip-compressed is
    # written gzip+base64 instead (issue 20), so only this kind is still too big.
    noise = base64.b64encode(random.Random(7).randbytes(150 * 1024)).decode()
    _secret(env, "big", {"user-data": "#cloud-config\n# " + noise})
    env.start_banlieue("manager")
    env.create(VMS, env.vm_body("big", userData={"secretRef": {"name": "big"}}))
    time.sleep(1.0)

    def settled() -> dict[str, Any] | None:
        ready = condition(env.get(f"{VMS}/big"), "Ready")
        return ready if ready.get("status") == "True" or ready.get("reason") == "InvalidSpec" else None

    ready = wait_for("user-data-big: Ready or InvalidSpec", settled, 45)
    assert ready["reason"] == "InvalidSpec" and "user" in ready["message"].lower(), ready
    # The limit is named (a guestinfo value holds 64 KiB, even gzip+base64) and nothing reached vCenter.
    assert "65536" in ready["message"] and "gzip" in ready["message"], ready
    with vc.oracle() as oracle:
        assert not oracle.managed(), "a VM was cloned with oversized user data"


# --- the provider role's pure connection builder, on malformed Secrets and CA bundles -------------

_values = st.one_of(st.text(max_size=40), st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
                    st.integers(), st.none())
_key_maps = st.dictionaries(st.sampled_from(["username", "password", "ca.crt", "other"]), _values, max_size=4)
_credentials = st.just({"username": "u", "password": "p"})  # valid, so the CA bundle is reached too
_objects = st.one_of(st.none(), st.fixed_dictionaries(
    {"metadata": st.just({"name": "s", "namespace": NS})},
    optional={"data": _key_maps, "stringData": st.one_of(_credentials, _key_maps), "binaryData": _key_maps}))
_bundles = st.one_of(st.none(), st.builds(lambda t: {"inline": t}, st.text(min_size=1, max_size=80)),
                     st.just({"configMapRef": {"name": "cm"}}), st.just({"secretRef": {"name": "ca"}}))


_GOOD = {"metadata": {"name": "s", "namespace": NS}, "stringData": {"username": "u", "password": "p"}}


@settings(max_examples=300, deadline=None)
@given(secret=_objects, ca_source=_objects, bundle=_bundles, insecure=st.booleans())
@example(secret=_GOOD, ca_source={"binaryData": {"ca.crt": "abc"}}, bundle={"configMapRef": {"name": "cm"}}, insecure=False)
@example(secret=_GOOD, ca_source={"binaryData": {"ca.crt": "\xff\xfe"}}, bundle={"configMapRef": {"name": "cm"}},
         insecure=False)
@example(secret=_GOOD, ca_source={"data": {"ca.crt": "%%%"}}, bundle={"secretRef": {"name": "ca"}}, insecure=False)
@example(secret=None, ca_source={"metadata": {"name": "s", "namespace": NS}, "data": {"username": "banlie"}}, bundle=None,
         insecure=False)  # part of the word "banlieue" in the message, not a quote (found in a run)
def test_malformed_secrets_and_ca_bundles_are_config_errors(secret: dict[str, Any] | None,
                                                           ca_source: dict[str, Any] | None,
                                                           bundle: dict[str, Any] | None, insecure: bool) -> None:
    """``connection_from_objects`` (used by the Provider, VMImage and VSphereMachine reconcilers)
    returns a Connection or raises ConnectionConfigError with a SPEC reason and a message that
    quotes no value: never any other exception."""
    from banlieue.api.provider import Provider
    from banlieue.reconcilers.connection import ConnectionConfigError, connection_from_objects

    connection: dict[str, Any] = {"endpoint": "https://vc.example/sdk", "credentialsRef": {"name": "s"},
                                  "insecureSkipTLSVerify": insecure}
    if bundle is not None:
        connection["caBundle"] = bundle
    provider = Provider.from_wire({**PROVIDER, "spec": {**PROVIDER["spec"], "connection": connection}})
    try:
        connection_from_objects(provider, secret, ca_source)
    except ConnectionConfigError as err:
        assert err.reason in ("SecretMissing", "SecretInvalid", "TLSVerifyFailed"), err.reason
        assert err.message
        for obj in (secret, ca_source):
            for section in ("data", "stringData", "binaryData"):
                for value in ((obj or {}).get(section) or {}).values():
                    # A value made of letters that is part of one of the message's own words
                    # ("banlie" in "banlieue") cannot be told from prose: not a quote.
                    prose = (isinstance(value, str) and value.isalpha()
                             and any(value in word for word in re.findall(r"[A-Za-z]+", err.message)))
                    if isinstance(value, str) and len(value) >= 6 and not prose:
                        assert value not in err.message, f"the message quotes a Secret value: {err.message!r}"
