"""``bench/capv.py`` and its counting proxy ``bench/soap_proxy.py`` (issue 22): what the proxy
counts (SOAP operation names, vAPI endpoints with their ``~action``), that it counts a real
client's requests to a real vcsim, that both providers get the same shape of work (the same
MachineDeployment, labelled control-plane, every endpoint on loopback) and that bad flags exit 2
before anything starts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from banlieue.testing.capi import loopback_violations
from banlieue.testing.vcsim import VcsimProcess, govc_binary

REPO = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


@pytest.fixture(scope="module")
def proxy_mod() -> ModuleType:
    return _load("soap_proxy")


@pytest.fixture(scope="module")
def capv() -> Iterator[ModuleType]:
    yield _load("capv")


def test_operation_names(proxy_mod: ModuleType) -> None:
    op = proxy_mod.operation
    envelope = b'<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="x"><soapenv:Body><CloneVM_Task xmlns="urn:vim25"><_this>'
    assert op("POST", "/sdk", envelope) == "CloneVM_Task"
    assert op("POST", "/sdk", b"<Envelope><Body>\n  <RetrievePropertiesEx>") == "RetrievePropertiesEx"
    assert op("GET", "/sdk/vimServiceVersions.xml", b"") == "REST GET /sdk/vimServiceVersions.xml"
    assert op("POST", "/rest/com/vmware/cis/session", b"") == "REST POST /rest/com/vmware/cis/session"
    assert op("POST", "/rest/com/vmware/cis/session", b"", {"~action": "get"}) == "REST POST /rest/com/vmware/cis/session?~action=get"
    assert op("GET", "/api/vcenter/vm/vm-52/hardware", b"") == "REST GET /api/vcenter/vm/{id}/hardware"


def test_property_reads_are_told_apart_by_object_type(proxy_mod: ModuleType) -> None:
    """The detail column: what a RetrievePropertiesEx read (pyVmomi's serialization of an ObjectSpec)."""
    poll = (b'<soapenv:Body><RetrievePropertiesEx xmlns="urn:vim25"><_this type="PropertyCollector">propertyCollector'
            b'</_this><specSet><propSet><type>Task</type></propSet><objectSet><obj type="Task">task-12</obj>')
    assert proxy_mod.detail("RetrievePropertiesEx", poll) == "Task"
    read = b'<RetrievePropertiesEx><specSet><objectSet><obj type="VirtualMachine">vm-7</obj><skip>false</skip>'
    assert proxy_mod.detail("RetrievePropertiesEx", read) == "VirtualMachine"
    assert proxy_mod.detail("CloneVM_Task", b'<obj type="Task">') == ""


def test_sessions_count_logins_not_checks(capv: ModuleType) -> None:
    from collections import Counter
    c = Counter({"Login": 2, "REST POST /rest/com/vmware/cis/session": 3, "REST POST /rest/com/vmware/cis/session?~action=get": 40,
                 "RetrievePropertiesEx": 9})
    assert capv.sessions(c) == 5


@pytest.mark.vcsim
def test_proxy_counts_a_real_client(capv: ModuleType, vcsim: VcsimProcess, tmp_path: Path) -> None:
    """govc through the proxy: its login, its reads and its logout are logged by name, and the
    answer is vcsim's (the template is found)."""
    proxy = capv.start_proxy(vcsim, tmp_path)
    try:
        env = {**os.environ, **vcsim.govc_env, "GOVC_URL": proxy.url + "/sdk"}
        out = subprocess.run([str(govc_binary()), "find", "/", "-type", "m", "-name", "ubuntu-22.04"], env=env,
                             capture_output=True, text=True, timeout=60, check=True)
        assert "/ubuntu-22.04" in out.stdout
        deadline = time.monotonic() + 5
        while not any(op == "Logout" for _, op in proxy.lines()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the proxy flushes its log every 0.5 s
        ops = [op for _, op in proxy.lines()]
        assert ops[0] == "RetrieveServiceContent" and "Login" in ops and "RetrievePropertiesEx" in ops and ops[-1] == "Logout", ops
        detailed = [op for _, op in proxy.lines(detailed=True)]
        assert len(detailed) == len(ops) and any(op.startswith("RetrievePropertiesEx ") for op in detailed), detailed
    finally:
        proxy.stop()
    assert proxy.process.returncode is not None


def test_both_providers_get_the_same_work_on_loopback(capv: ModuleType, tmp_path: Path) -> None:
    vc = VcsimProcess(process=None, workdir=tmp_path, info={"username": "u", "password": "p", "ca_file": str(tmp_path / "ca.pem")})  # type: ignore[arg-type]
    # A self-signed certificate stands in for vcsim's (CAPV's thumbprint is computed from it).
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(tmp_path / "k.pem"), "-out", str(tmp_path / "server.pem")],
                   check=True, capture_output=True)
    (tmp_path / "ca.pem").write_bytes((tmp_path / "server.pem").read_bytes())
    proxy = capv.Proxy(process=None, port=4443, log_path=tmp_path / "log")
    shapes = {}
    for provider in ("banlieue", "capv"):
        objs = capv.cluster_objects(provider, f"ns-{provider}", vc, proxy, 7)
        assert loopback_violations(objs) == []
        md = objs[-1]
        assert md["kind"] == "MachineDeployment" and md["spec"]["replicas"] == 7
        assert capv.LABEL_CONTROL_PLANE in md["spec"]["template"]["metadata"]["labels"]
        assert md["spec"]["template"]["spec"]["bootstrap"] == {"dataSecretName": "bench-bootstrap"}
        shapes[provider] = [o["kind"] for o in objs if o["kind"] != "Provider"]
    assert shapes["banlieue"] == shapes["capv"]
    capv_cluster = next(o for o in capv.cluster_objects("capv", "n", vc, proxy, 1) if o["kind"] == "VSphereCluster")
    assert capv_cluster["spec"]["server"] == "https://127.0.0.1:4443"
    assert len(capv_cluster["spec"]["thumbprint"].split(":")) == 32  # SHA-256


@pytest.mark.parametrize(("args", "message"), [
    (["--machines", "0"], "--machines must be >= 1"),
    (["--providers", "capv,other"], "--providers: a comma list of banlieue, capv"),
    (["--deployments", "0"], "--deployments must be between 1 and --machines"),
    (["--clone-seconds", "-1"], "--clone-seconds must be a finite number of seconds >= 0"),
    (["--clone-seconds", "nan"], "--clone-seconds must be a finite number of seconds >= 0"),
    (["--timeout", "inf"], "--timeout must be a finite number of seconds >= 1"),
    (["--idle-long", "-5"], "--idle-long must be a finite number of seconds >= 0"),
])
def test_bad_flags_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "capv.py"), *args], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()  # one line, not argparse's usage before it
    assert line.startswith("bench/capv.py: error: ") and message in line


@pytest.mark.parametrize(("args", "message"), [
    (["--gate", "g", "--providers", "banlieue"], "--gate FILE waits before the second provider: give two in --providers"),
    (["--gate", "no-such-dir/g"], "--gate no-such-dir/g: its directory no-such-dir does not exist (the wait would never end)"),
    (["--providers", "banlieue,banlieue"], "--providers: a comma list of banlieue, capv"),
    # A results file the run would not write is refused, not ignored (it was, silently).
    (["--providers", "banlieue", "--out", "x.json"],
     "--out is the side-by-side results file, written when both providers run: with one, use --solo-out FILE"),
    (["--solo-out", "x.json"], "--solo-out FILE is for --providers banlieue alone; both providers write --out"),
    (["--providers", "capv", "--solo-out", "x.json"], "--solo-out FILE is for --providers banlieue alone; both providers write --out"),
    (["--idle", "300", "--idle-long", "300"], "--idle-long must be 0 or longer than --idle (300 s), got 300"),
    (["--providers", "banlieue", "--solo-label", "x"], "--solo-label names an entry of --solo-out FILE: give --solo-out too"),
])
def test_bad_gate_and_providers_exit_2(capv: ModuleType, args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In process (no interpreter start): refused before anything starts, one error line."""
    monkeypatch.chdir(tmp_path)

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the benchmark started")
    monkeypatch.setattr(capv, "start_envtest", started)
    with pytest.raises(SystemExit) as exit_info:
        capv.main(args)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"bench/capv.py: error: {message}"


def _write(user: str, verb: str, name: str, rv: str, at: str, sub: str = "", **meta: object) -> dict[str, object]:
    ref = {"apiGroup": "infrastructure.banlieue.io", "resource": "vspheremachines", "namespace": "ns", "name": name}
    if sub:
        ref["subresource"] = sub
    return {"stage": "ResponseComplete", "verb": verb, "user": {"username": user}, "objectRef": ref,
            "requestReceivedTimestamp": f"2026-12-02T04:00:{at}Z", "responseStatus": {"code": 201 if verb == "create" else 200},
            "responseObject": {"kind": "VSphereMachine", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta}}}


def test_writes_that_changed_nothing_are_those_answered_with_a_version_already_seen(capv: ModuleType, tmp_path: Path) -> None:
    """Issue 22's metric: a write answered with a resourceVersion an earlier write of the object
    (any user's) was answered with changed nothing; the last finalizer's removal (the object is
    deleted, answered as it was) is not counted, nor another user's write or one outside the window."""
    me, other = "system:serviceaccount:b:m", "capi"
    events = [
        _write(other, "create", "a", "1", "00"),
        _write(me, "patch", "a", "2", "01"),           # changed
        _write(me, "patch", "a", "2", "02", "status"),  # nothing changed: counted
        _write(other, "patch", "a", "2", "03"),        # another user's no-op: not counted
        _write(me, "patch", "a", "3", "04", "status"),  # changed
        _write(me, "patch", "a", "3", "05", deletionTimestamp="2026-12-02T04:00:05Z"),  # finalizer gone: not counted
        _write(me, "patch", "a", "3", "30"),           # outside the window
    ]

    class Env:
        audit_log = tmp_path / "audit.log"

    Env.audit_log.write_text("".join(json.dumps(e) + "\n" for e in events))

    start = capv.parse_ts("2026-12-02T04:00:00Z")
    assert dict(capv.noop_writes(Env(), me, start, start + 20)) == {"patch vspheremachines/status": 1}


@pytest.mark.parametrize(("upstream", "message"), [
    ("https://localhost:8989", "loopback only"),
    ("https://192.0.2.1:443", "loopback only"),
    ("http://127.0.0.1:8989", "loopback only"),
    ("https://127.0.0.1:99999", "loopback only"),
    ("notaurl", "loopback only"),
])
def test_the_proxy_refuses_an_upstream_off_loopback_before_starting(upstream: str, message: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "soap_proxy.py"), "--upstream", upstream, "--ca", "x", "--cert", "y",
                           "--key", "z", "--port-file", str(tmp_path / "p"), "--log", str(tmp_path / "l")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "l").exists()  # nothing opened


def test_vms_capi_asked_to_destroy_are_the_machines_it_deleted(capv: ModuleType, tmp_path: Path) -> None:
    """CAPI core's MachineSet deleted a surplus Machine in CAPV's 1,000-machine wave; the VM its
    provider destroyed then is asked for, not 'destroyed unasked'."""
    def delete(resource: str, ns: str, at: str, code: int = 200) -> dict[str, object]:
        return {"stage": "ResponseComplete", "verb": "delete", "user": {"username": "capi"},
                "objectRef": {"resource": resource, "namespace": ns, "name": "m"}, "responseStatus": {"code": code},
                "requestReceivedTimestamp": f"2026-12-02T04:00:{at}Z"}

    log = tmp_path / "audit.log"
    log.write_text("".join(json.dumps(e) + "\n" for e in (
        delete("machines", "bench-capv", "01"), delete("machines", "bench-capv", "02", 404), delete("vspheremachines", "bench-capv", "03"),
        delete("machines", "other", "04"), delete("machines", "bench-capv", "30"))))
    start = capv.parse_ts("2026-12-02T04:00:00Z")
    assert capv.machines_deleted(log, "bench-capv", start, start + 20) == 1


def _raw(soap_idle: dict[str, int], long: dict[str, int] | None) -> dict[str, object]:
    r: dict[str, object] = {
        "provision_seconds": 10.0, "delete_seconds": 5.0, "cpu_seconds_per_machine": 0.1, "delete_cpu_seconds_per_machine": 0.1,
        "peak_rss_mib": 100.0, "api_provision": {"patch vspheremachines": 20}, "api_noop_provision": {},
        "soap_provision": {"CloneVM_Task": 10}, "soap_delete": {}, "api_delete": {}, "soap_sessions_total": 1,
        "api_idle": {"get secrets": 1}, "soap_idle": soap_idle, "idle_window_seconds": 300.0, "restart_seconds": 1.0}
    if long is not None:
        r.update(idle_long_window_seconds=720.0, api_idle_long={"get secrets": 3}, soap_idle_long=long)
    return r


def test_idle_figures_set_the_probe_apart_and_the_long_window_is_reported_when_both_ran(capv: ModuleType) -> None:
    banlieue = _raw({"CurrentTime": 60, "WaitForUpdatesEx": 5, "RetrievePropertiesEx": 1}, {"CurrentTime": 144, "WaitForUpdatesEx": 12})
    other = _raw({}, {"RetrievePropertiesEx": 2400, "FindByUuid": 600})
    got = {e["name"]: (e["banlieue"], e["capv"]) for e in capv.entries(banlieue, other, 10)}
    assert got["idle_soap_requests_per_minute_10"] == (13.2, 0.0)
    assert got["idle_soap_beyond_probe_per_minute_10"] == (1.2, 0.0)
    assert got["idle_long_soap_requests_per_minute_10"] == (13.0, 250.0)
    assert got["idle_long_api_requests_per_minute_10"] == (0.2, 0.2)
    # A run without the long window (one side or both) has no such entries rather than a guess.
    names = {e["name"] for e in capv.entries(banlieue, _raw({}, None), 10)}
    assert not {n for n in names if n.startswith("idle_long_")}
