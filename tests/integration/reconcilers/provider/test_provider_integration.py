"""Provider reconciler end to end: a real Manager against the API-server double (HTTP) and the
vSphere backend against vcsim (SOAP). Objects are created over HTTP; the reconciler's status
is read back over HTTP.

The provider-role harness (``running_role``, ``provider_body``, ``secret_body``, ``provider_with``)
is in ../provider_role.py, shared with the VMImage and VSphereMachineTemplate tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY
from provider_role import (
    answered_calls,
    condition,
    provider_body,
    provider_with,
    running_role,
    secret_body,
    silent_listener,
)
from reconciler_harness import eventually

from banlieue.api.provider import PROVIDER_REACHABLE
from banlieue.backends.vsphere import backend as backend_module
from banlieue.backends.vsphere.backend import VSphereBackend
from banlieue.reconcilers.kinds import CONFIG_MAP, PROVIDER, SECRET
from banlieue.reconcilers.provider import controller as provider_reconciler
from banlieue.reconcilers.provider.decide import UNREACHABLE_MESSAGE
from banlieue.runtime.client import Client
from banlieue.runtime.kinds import EVENT
from banlieue.runtime.metrics import RECONCILE_RESULTS
from banlieue.testing.vcsim import VcsimProcess


def reconciles(controller: str) -> float:
    """Finished reconciles of ``controller`` so far (controller_runtime_reconcile_total)."""
    return sum(
        REGISTRY.get_sample_value("controller_runtime_reconcile_total", {"controller": controller, "result": r}) or 0.0
        for r in RECONCILE_RESULTS
    )


async def _more(than: float) -> bool:
    return reconciles("provider") > than


@pytest.mark.vcsim
async def test_provider_reports_six_failure_domains(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend) -> None:
    secret = secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password)
    await client.create(SECRET, secret)
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    start = reconciles("provider")
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        obj = await provider_with(client, "vc1", namespace, "Reconciled", "True")
        # Another reconcile (Secret touched) that observes the same inventory writes nothing.
        await eventually(lambda: _more(start), timeout=20.0, what="the first reconcile counted")
        before = reconciles("provider")
        secret["metadata"]["annotations"] = {"touched": "1"}
        await client.update(SECRET, secret)
        await eventually(lambda: _more(before), timeout=20.0, what="a second reconcile")
        again = await client.get(PROVIDER, "vc1", namespace)
        assert again["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert condition(obj, PROVIDER_REACHABLE)["status"] == "True"
    assert "storageClass ghost" in condition(obj, "Ready")["message"]
    fds = {fd["name"]: fd for fd in status["failureDomains"]}
    assert sorted(fds) == [f"vc1-dc{d}-dc{d}-c{c}" for d in (0, 1) for c in (0, 1, 2)]
    fd = fds["vc1-dc0-dc0-c1"]
    assert fd["labels"] == {"dc": "DC0", "cluster": "DC0_C1"}
    attrs = fd["attributes"]
    assert attrs["raw"] == {"datacenter": "DC0", "cluster": "DC0_C1"}
    assert attrs["availableStorageClasses"] == ["local"]
    assert attrs["availableNetworkClasses"] == ["dc0-only", "lan"]
    assert fds["vc1-dc1-dc1-c0"]["attributes"]["availableNetworkClasses"] == ["lan"]
    cap = attrs["capacity"]
    assert cap["cpuMHz"] > 0 and cap["memoryMiB"] > 0 and cap["storageGiB"] > 0
    assert isinstance(attrs.get("features"), list)
    events = await client.list(EVENT, namespace)
    assert any(e.get("reason") == "Reconciled" and (e.get("regarding") or e.get("involvedObject") or {}).get("name") == "vc1" for e in events.get("items", []))


@pytest.mark.vcsim
async def test_missing_secret_then_created_recovers(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend) -> None:
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        obj = await provider_with(client, "vc1", namespace, "SecretMissing", "False")
        assert "spec.connection.credentialsRef" in condition(obj, "Ready")["message"]
        assert condition(obj, PROVIDER_REACHABLE)["reason"] == "SecretMissing"
        await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
        obj = await provider_with(client, "vc1", namespace, "Reconciled", "True")
    assert len(obj["status"]["failureDomains"]) == 6


@pytest.mark.vcsim
async def test_secret_without_password_is_invalid(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend) -> None:
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        obj = await provider_with(client, "vc1", namespace, "SecretInvalid", "False")
    assert "password" in condition(obj, "Ready")["message"]


@pytest.mark.vcsim
async def test_wrong_password_is_secret_invalid_and_fixing_the_secret_recovers(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend
) -> None:
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password="hunter2-bad"))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        obj = await provider_with(client, "vc1", namespace, "SecretInvalid", "False")
        message = condition(obj, "Ready")["message"]
        assert "refused the credentials" in message and "hunter2-bad" not in message
        assert "failureDomains" not in obj["status"]
        await client.update(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
        obj = await provider_with(client, "vc1", namespace, "Reconciled", "True")
    assert len(obj["status"]["failureDomains"]) == 6


@pytest.mark.vcsim
async def test_wrong_ca_is_connect_failed_and_fixing_the_configmap_recovers(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, vcsim_factory: Callable[..., VcsimProcess], backend: VSphereBackend
) -> None:
    other = vcsim_factory(dc=1, cluster=1)  # a valid CA that did not sign vcsim's certificate
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "vc-ca", "namespace": namespace}, "data": {"ca.crt": other.ca_pem}}
    await client.create(CONFIG_MAP, cm)
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim, ca={"configMapRef": {"name": "vc-ca"}}))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        # Said as an unreachable endpoint, the caBundle among the causes (what listens on an
        # endpoint is not told to whoever reads the Provider; the log says which).
        obj = await provider_with(client, "vc1", namespace, "ConnectFailed", "False")
        assert condition(obj, "Ready")["message"] == UNREACHABLE_MESSAGE and "caBundle" in UNREACHABLE_MESSAGE
        assert condition(obj, PROVIDER_REACHABLE)["reason"] == "ConnectFailed"
        await client.update(CONFIG_MAP, {**cm, "data": {"ca.crt": vcsim.ca_pem}})
        await provider_with(client, "vc1", namespace, "Reconciled", "True")


@pytest.mark.vcsim
async def test_no_ca_bundle_is_connect_failed_insecure_works(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend
) -> None:
    for name in ("strict", "insecure"):
        await client.create(SECRET, secret_body(f"{name}-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("strict", namespace, vcsim, ca={}))
    insecure = provider_body("insecure", namespace, vcsim, ca={})
    insecure["spec"]["connection"]["insecureSkipTLSVerify"] = True
    await client.create(PROVIDER, insecure)
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "strict", namespace, "ConnectFailed", "False")
        obj = await provider_with(client, "insecure", namespace, "Reconciled", "True")

        async def warned() -> bool:
            items = (await client.list(EVENT, namespace)).get("items", [])
            return any(e.get("reason") == "InsecureSkipTLSVerify" and e.get("type") == "Warning"
                       and (e.get("regarding") or {}).get("name") == "insecure" for e in items)

        await eventually(warned, timeout=20.0, what="a Warning event InsecureSkipTLSVerify on the insecure Provider")
        events = (await client.list(EVENT, namespace)).get("items", [])
        assert not [e for e in events if e.get("reason") == "InsecureSkipTLSVerify" and (e.get("regarding") or {}).get("name") == "strict"]
    assert len(obj["status"]["failureDomains"]) == 6


@pytest.mark.vcsim
async def test_vcenter_down_keeps_failure_domains_and_changes_conditions(
    apiserver: Any, client: Client, namespace: str, vcsim_factory: Callable[..., VcsimProcess], backend: VSphereBackend
) -> None:
    vc = vcsim_factory()
    secret = secret_body("vc1-creds", namespace, username=vc.username, password=vc.password)
    await client.create(SECRET, secret)
    await client.create(PROVIDER, provider_body("vc1", namespace, vc))
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        before = await provider_with(client, "vc1", namespace, "Reconciled", "True")
        vc.stop()
        # Touch the Secret: the Secret watch reconciles the Provider now (the refresh is 5 min).
        secret["metadata"]["annotations"] = {"touched": "1"}
        await client.update(SECRET, secret)
        after = await provider_with(client, "vc1", namespace, "ConnectFailed", "False")
    assert condition(after, PROVIDER_REACHABLE)["status"] == "False"
    assert after["status"]["failureDomains"] == before["status"]["failureDomains"]


@pytest.mark.vcsim
async def test_paused_and_unsupported_class(apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend) -> None:
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
    other = provider_body("kv", namespace, vcsim)
    other["spec"]["providerClassRef"] = {"name": "kubevirt"}
    await client.create(PROVIDER, other)
    async with running_role(apiserver, [provider_reconciler.setup], backend):
        before = await provider_with(client, "vc1", namespace, "Reconciled", "True")
        obj = await provider_with(client, "kv", namespace, "UnsupportedProviderClass", "False")
        assert "kubevirt" in condition(obj, "Ready")["message"]
        await client.patch(PROVIDER, "vc1", namespace, {"spec": {"paused": True}})
        paused = await provider_with(client, "vc1", namespace, "Paused", "True")
    assert condition(paused, PROVIDER_REACHABLE)["reason"] == "Paused"
    assert paused["status"]["failureDomains"] == before["status"]["failureDomains"]
    assert paused["status"]["observedGeneration"] == paused["metadata"]["generation"] > before["metadata"]["generation"]


@pytest.mark.vcsim
async def test_vcenter_that_stops_answering_is_reported_without_waiting_for_the_refresh(
    apiserver: Any, client: Client, namespace: str, vcsim_factory: Callable[..., VcsimProcess], backend: VSphereBackend
) -> None:
    # The provider role's change watch polls the vCenter; when a round trip goes unanswered the
    # backend tells the Provider controller (provider.reachability), which re-checks at once
    # instead of at the next 5-minute refresh. Nothing else touches the Provider here.
    from banlieue.backends.base import Connection

    vc = vcsim_factory()
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vc.username, password=vc.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vc))
    conn = Connection(provider=f"{namespace}/vc1", endpoint=vc.endpoint, username=vc.username, password=vc.password,
                      ca_bundle=vc.ca_pem)

    async def watch() -> None:  # what the VSphereMachine controller's vCenter watch does
        async for _ in backend.watch(conn):
            pass

    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "vc1", namespace, "Reconciled", "True")
        watcher = asyncio.create_task(watch())
        try:
            await asyncio.sleep(1.0)  # the watch is polling
            vc.stop()
            after = await provider_with(client, "vc1", namespace, "ConnectFailed", "False")
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
    assert condition(after, PROVIDER_REACHABLE)["status"] == "False"


def _answered(label: str) -> float:
    """SOAP round trips to ``label`` that got an answer (outcome success or fault): requests that
    went through a TLS connection."""
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name != "banlieue_vsphere_requests":
            continue
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels.get("vcenter") == label and s.labels.get("outcome") in ("success", "fault"):
                total += s.value
    return total


@pytest.mark.vcsim
async def test_certificate_rotated_to_another_ca_is_connect_failed_within_seconds(
    apiserver: Any, client: Client, namespace: str, vcsim_factory: Callable[..., VcsimProcess], backend: VSphereBackend
) -> None:
    """Issue 20 item 1 (CAPV #1718, #1134, #3372): the vCenter comes back on the same host and
    port with a certificate of another CA. The Provider says ConnectFailed (a certificate that does
    not verify is said as an unreachable endpoint) within seconds, no
    request gets through (no answered round trip, Login included), and updating only the CA
    bundle recovers without a restart."""
    from banlieue.backends.base import Connection
    from banlieue.testing.vcsim import start_vcsim

    vc = vcsim_factory()
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vc.username, password=vc.password))
    await client.create(PROVIDER, provider_body("vc1", namespace, vc))
    conn = Connection(provider=f"{namespace}/vc1", endpoint=vc.endpoint, username=vc.username, password=vc.password,
                      ca_bundle=vc.ca_pem)
    label = f"127.0.0.1:{vc.port}"

    async def watch() -> None:  # what the VSphereMachine controller's vCenter watch does
        with contextlib.suppress(Exception):
            async for _ in backend.watch(conn):
                pass

    async with running_role(apiserver, [provider_reconciler.setup], backend):
        await provider_with(client, "vc1", namespace, "Reconciled", "True")
        watcher = asyncio.create_task(watch())
        try:
            await asyncio.sleep(1.0)  # the watch is polling
            old_ca = vc.ca_pem
            vc.stop()
            rotated = start_vcsim(listen=label)  # a fresh CA: the Provider's bundle does not sign it
            try:
                assert rotated.ca_pem != old_ca
                answered = _answered(label)
                started = asyncio.get_running_loop().time()
                after = await provider_with(client, "vc1", namespace, "ConnectFailed", "False")
                took = asyncio.get_running_loop().time() - started
                assert took < 20, f"ConnectFailed after {took:.1f} s"
                assert condition(after, PROVIDER_REACHABLE)["reason"] == "ConnectFailed"
                assert "failureDomains" in after["status"], "what was known is kept"
                await asyncio.sleep(2.0)
                assert _answered(label) == answered, "a request went through the untrusted connection"

                body = await client.get(PROVIDER, "vc1", namespace)
                body["spec"]["connection"]["caBundle"] = {"inline": rotated.ca_pem}
                await client.update(PROVIDER, body)
                await provider_with(client, "vc1", namespace, "Reconciled", "True")
            finally:
                rotated.stop()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher


class TLSProxy:
    """A TLS-terminating TCP proxy on 127.0.0.1 in front of a vcsim: serves ``cert_dir``'s
    ``server.pem``/``server-key.pem`` to each new connection (``rotate`` swaps the directory:
    kept-alive connections stay as they were, as behind a real load balancer) and forwards the
    bytes to vcsim over TLS. ``sent_after(t)``: bytes clients sent after monotonic time ``t``.

    It runs an asyncio loop on its own thread: each TLS connection is used by that one thread
    (asyncio's TLS runs over memory buffers). The first version pumped each direction on its own
    thread, so one ``ssl.SSLSocket`` was read on one thread while written on another; OpenSSL
    objects are not safe for that, and on the TLS 1.3 leg to vcsim about one request in ten was
    lost (measured: 35 of 300 ``GET /sdk/vimServiceVersions.xml`` never answered; 0 of 150 with
    that leg held to TLS 1.2), which stalled this test's setup."""

    def __init__(self, upstream: VcsimProcess, cert_dir: str) -> None:
        import ssl

        self._ssl = ssl
        self.upstream = upstream
        self.rotate(cert_dir)
        self.client_ctx = ssl.create_default_context(cafile=upstream.ca_file)
        self.sends: list[tuple[float, int]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port: int = self.listener.getsockname()[1]
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._accepting = asyncio.run_coroutine_threadsafe(self._accept(), self._loop)

    def rotate(self, cert_dir: str) -> None:
        ctx = self._ssl.SSLContext(self._ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(f"{cert_dir}/server.pem", f"{cert_dir}/server-key.pem")
        self.server_ctx = ctx

    def sent_after(self, t: float) -> int:
        return sum(n for at, n in list(self.sends) if at > t)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            raw, _ = await loop.sock_accept(self.listener)
            task = loop.create_task(self._serve(raw, self.server_ctx))  # the certificate of the moment
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, raw: Any, ctx: Any) -> None:
        import time

        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader()
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, raw, ssl=ctx, ssl_handshake_timeout=10)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(
                self.upstream.host, self.upstream.port, ssl=self.client_ctx, server_hostname=self.upstream.host), 10)
        except OSError:  # TimeoutError is one
            raw.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, count: bool) -> None:
            try:
                while data := await src.read(65536):
                    if count:
                        self.sends.append((time.monotonic(), len(data)))
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                for w in (writer, up_writer):
                    w.close()

        await asyncio.gather(pump(up_reader, writer, False), pump(reader, up_writer, True))

    def close(self) -> None:
        """Stop accepting, cut every proxied connection, stop and close the loop."""

        async def shutdown() -> None:
            for task in [*self._tasks]:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        self._accepting.cancel()
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
        self.listener.close()


@pytest.mark.vcsim
async def test_certificate_swapped_behind_kept_alive_connections_is_connect_failed(
    apiserver: Any, client: Client, namespace: str, vcsim_factory: Callable[..., VcsimProcess], backend: VSphereBackend
) -> None:
    """Issue 20 item 1, the hard case: the certificate changes behind a TLS front end (same host
    and port) while banlieue's connections to it stay open. Within seconds the Provider says
    ConnectFailed and nothing more is sent, kept-alive connections included (the change
    watch long-polls on one); updating only the CA bundle recovers without a restart."""
    import time
    from pathlib import Path

    from banlieue.backends.base import Connection

    vc = vcsim_factory()
    other = vcsim_factory(dc=1, cluster=1)  # only its CA and certificate are used
    proxy = TLSProxy(vc, str(Path(vc.ca_file).parent))
    endpoint = f"127.0.0.1:{proxy.port}"
    await client.create(SECRET, secret_body("vc1-creds", namespace, username=vc.username, password=vc.password))
    body = provider_body("vc1", namespace, vc)
    body["spec"]["connection"]["endpoint"] = endpoint
    await client.create(PROVIDER, body)
    conn = Connection(provider=f"{namespace}/vc1", endpoint=endpoint, username=vc.username, password=vc.password, ca_bundle=vc.ca_pem)

    async def watch() -> None:  # what the VSphereMachine controller's vCenter watch does
        with contextlib.suppress(Exception):
            async for _ in backend.watch(conn):
                pass

    try:
        async with running_role(apiserver, [provider_reconciler.setup], backend):
            await provider_with(client, "vc1", namespace, "Reconciled", "True")
            watcher = asyncio.create_task(watch())
            try:
                await asyncio.sleep(1.5)  # the watch long-polls on its kept-alive connection
                proxy.rotate(str(Path(other.ca_file).parent))
                rotated_at = time.monotonic()
                # (ConnectFailed: a certificate that does not verify is said as an unreachable
                # endpoint; here nothing else fails, the proxy keeps answering.)
                after = await provider_with(client, "vc1", namespace, "ConnectFailed", "False")
                detected_at = time.monotonic()
                assert detected_at - rotated_at < 15, f"ConnectFailed after {detected_at - rotated_at:.1f} s"
                assert condition(after, PROVIDER_REACHABLE)["reason"] == "ConnectFailed"
                assert "failureDomains" in after["status"], "what was known is kept"
                await asyncio.sleep(7.0)  # longer than the watch's long poll (5 s): it would poll again
                assert proxy.sent_after(detected_at) == 0, "a request went through a kept-alive connection"

                fixed = await client.get(PROVIDER, "vc1", namespace)
                fixed["spec"]["connection"]["caBundle"] = {"inline": other.ca_pem}
                await client.update(PROVIDER, fixed)
                await provider_with(client, "vc1", namespace, "Reconciled", "True")
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watcher
    finally:
        proxy.close()


@pytest.mark.vcsim
async def test_silent_endpoints_hold_no_worker_from_other_providers(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, backend: VSphereBackend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 23 case 4, the Provider controller (new-user finding): Providers whose endpoint
    accepts TCP and never answers held a worker each for the request timeout, twice (TLS
    handshake, then version discovery), and again at every retry; as many of them as workers
    (4 here, 10 by default) and no other Provider got a status for minutes. A first contact now
    holds a worker for at most ``CONTACT_WAIT_SECONDS``; later reconciles only look at it."""
    monkeypatch.setattr(provider_reconciler, "CONTACT_WAIT_SECONDS", 1.0)
    with silent_listener() as silent:
        await client.create(SECRET, secret_body("creds", namespace, username=vcsim.username, password=vcsim.password))
        for i in range(6):  # more silent Providers than the role's 4 workers
            hung = provider_body(f"silent-{i}", namespace, vcsim)
            hung["spec"]["connection"]["credentialsRef"]["name"] = "creds"
            hung["spec"]["connection"]["endpoint"] = silent.endpoint
            await client.create(PROVIDER, hung)
        async with running_role(apiserver, [provider_reconciler.setup], backend):
            await asyncio.sleep(2.0)  # the silent ones are being reconciled first
            started = time.monotonic()
            good = provider_body("good", namespace, vcsim)
            good["spec"]["connection"]["credentialsRef"]["name"] = "creds"
            await client.create(PROVIDER, good)
            await provider_with(client, "good", namespace, "Reconciled", "True")
            took = time.monotonic() - started
            hung_now = await client.get(PROVIDER, "silent-0", namespace)
    assert silent.accepted, "the silent listener was never dialled: the test proves nothing"
    assert took < 6.0, f"the good Provider waited {took:.1f} s behind the silent ones"
    assert condition(hung_now, "ProviderReachable")["reason"] == "ConnectFailed", hung_now.get("status")



@pytest.mark.vcsim
async def test_a_busy_vcenter_keeps_its_provider_status_while_the_first_call_waits_its_turn(
    apiserver: Any, client: Client, namespace: str, vcsim: VcsimProcess, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found at the 10,000-VM cold start (``bench/e2e.py --only memory``, 2026-12-07): the
    Provider's first call waited in its vCenter's thread pool behind thousands of VM reads that
    the vCenter was answering, past ``CONTACT_WAIT_SECONDS``; the Provider was written
    ``ConnectFailed`` ("vCenter did not answer within 10 s") and ``Reconciled`` again 3 times,
    and every change re-enqueued all 20,000 VMs and VSphereMachines. A vCenter that answered
    other requests meanwhile is busy, not silent: the status stays, the call is looked at again.
    Here the pool has one worker, held by calls that the vCenter answers for 4 s."""
    monkeypatch.setattr(provider_reconciler, "CONTACT_WAIT_SECONDS", 1.0)
    monkeypatch.setattr(backend_module, "ABOUT_FRESH_SECONDS", 0.0)  # about() sends its CurrentTime
    one = VSphereBackend(max_workers=1, task_timeout=60.0, request_timeout=10.0, watch_max_wait=5.0, index_ttl=1.0)
    try:
        secret = secret_body("vc1-creds", namespace, username=vcsim.username, password=vcsim.password)
        await client.create(SECRET, secret)
        await client.create(PROVIDER, provider_body("vc1", namespace, vcsim))
        async with running_role(apiserver, [provider_reconciler.setup], one):
            ready = await provider_with(client, "vc1", namespace, "Reconciled", "True")
            conn = next(iter(one.sessions.sessions.values())).conn
            busy = asyncio.ensure_future(one.sessions.run(conn, answered_calls(4.0)))
            await asyncio.sleep(0.2)  # the worker is taken
            before = reconciles("provider")
            secret["metadata"]["annotations"] = {"touched": "1"}
            await client.update(SECRET, secret)
            await eventually(lambda: _more(before), timeout=10.0, what="a reconcile while the pool is busy")
            assert not busy.done(), "the pool was free before the reconcile ended: the test proves nothing"
            during = await client.get(PROVIDER, "vc1", namespace)
            sent = await busy
            after = await client.get(PROVIDER, "vc1", namespace)
            await asyncio.sleep(provider_reconciler.CONTACT_RECHECK_SECONDS + 1.0)  # the call looked at again
            settled = await client.get(PROVIDER, "vc1", namespace)
    finally:
        await one.close()
    assert sent >= 10, f"only {sent} calls answered while the pool was held"
    for got in (during, after, settled):
        assert condition(got, "Ready")["reason"] == "Reconciled", got.get("status")
        assert got["metadata"]["resourceVersion"] == ready["metadata"]["resourceVersion"], got.get("status")
