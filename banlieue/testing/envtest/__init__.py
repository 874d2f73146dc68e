"""envtest: a real kube-apiserver, etcd and kube-controller-manager on loopback, for every test tier.

The binaries are ``bin/kube-apiserver``, ``bin/kube-controller-manager`` and ``bin/etcd``, built by
``make envtest`` from the pinned Go modules under ``hack/envtest/`` (k8s.io/kubernetes v1.34.4,
go.etcd.io/etcd/server/v3 v3.6.16); ``$BANLIEUE_ENVTEST_BIN`` names another directory holding them.

What runs (every listener and every URL is on 127.0.0.1; the service cluster IP range is only a
number space for Service objects: nothing here routes to it):

- etcd: client and peer URL on free ports, data in ``DIR/etcd``, ``--unsafe-no-fsync`` (a test
  cluster; losing it on a crash costs nothing).
- kube-apiserver: ``--bind-address``/``--advertise-address`` 127.0.0.1, a serving certificate from
  a CA generated here (the ``openssl`` command line: the venv has no ``cryptography``), client
  certificates signed by the same CA, ``--authorization-mode=Node,RBAC``, the default admission
  plugins of v1.34 (ValidatingAdmissionPolicy among them: GA since 1.30) plus NodeRestriction and
  OwnerReferencesPermissionEnforcement (whoever sets an ownerReference with
  ``blockOwnerDeletion`` must be allowed to update the owner's ``finalizers`` subresource, as on
  clusters that enable it, OpenShift among them: CAPI's owner references on banlieue's objects
  and banlieue's own are then checked against their RBAC), a service-account issuer with an ECDSA signing key, an audit log (level Metadata, JSON lines) in
  ``DIR/logs/audit.log`` from which tests count 403s.
- kube-controller-manager with only the controllers the API itself relies on:
  ``garbagecollector`` (ownerReferences), ``namespace`` (namespace deletion), ``serviceaccount``
  (each namespace's ``default`` ServiceAccount), ``serviceaccount-token`` (legacy token
  Secrets; needs ``--service-account-private-key-file`` and ``--root-ca-file``) and
  ``clusterrole-aggregation`` (fills ClusterRoles with an ``aggregationRule``: CAPI's managers are
  bound to such roles, and banlieue's ``capi_aggregate`` role reaches them that way). Its secure port
  is a free 127.0.0.1 port. It authenticates with a client certificate in ``system:masters``, as
  the control plane's own component (the RBAC under test is banlieue's, not kcm's).

Ready means: apiserver ``/readyz`` 200, kcm ``/healthz`` 200 and the ``default`` ServiceAccount of
namespace ``default`` created (the serviceaccount controller runs).

Public API:

- :func:`start_envtest(dir) <start_envtest>` (context manager) -> :class:`Envtest`: ``url``,
  ``ca_file``, ``ca_pem``, ``kubeconfig_path`` (cluster-admin), ``audit_log``, ``log_dir``,
  ``request()``, ``token_for(namespace, name)`` (TokenRequest), ``write_token_kubeconfig()``,
  ``audit_events()``, ``stop()``.
- ``python -m banlieue.testing.envtest up --dir DIR``: the same as a process; prints one line when
  ready, runs until SIGTERM/SIGINT, then stops everything and removes what it wrote into DIR.
  A failure is one line on stderr naming the log to read, exit status 1.
- pytest fixture ``envtest`` (session scope, :mod:`banlieue.testing.envtest.fixture`) and
  :func:`envtest_binaries_missing` (a skip reason).

Raises :class:`EnvtestError` (one line: what failed and which log to read).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from banlieue.cmd.dev import free_ports
from banlieue.testing.processes import terminate

REPO_ROOT = Path(__file__).resolve().parents[3]
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
KCM_CONTROLLERS = "garbagecollector,namespace,serviceaccount,serviceaccount-token,clusterrole-aggregation"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
"""Only a number space for Service cluster IPs (nothing routes to it: there is no kube-proxy)."""
ADMIN_USER = "envtest-admin"
STARTUP_TIMEOUT = 60.0  # seconds; a loaded 2-core CI machine needs ~5 s
STOP_GRACE = 15.0  # seconds after SIGTERM before SIGKILL

AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


class EnvtestError(RuntimeError):
    """envtest could not start: ``str(err)`` is one line naming the log file to read."""


def bin_dir() -> Path:
    """``$BANLIEUE_ENVTEST_BIN`` or ``<repo>/bin``."""
    return Path(os.environ.get("BANLIEUE_ENVTEST_BIN") or REPO_ROOT / "bin")


def envtest_binaries_missing() -> str | None:
    """None when all three binaries exist, else a skip reason naming the missing ones."""
    missing = [name for name in BINARIES if not os.access(bin_dir() / name, os.X_OK)]
    if missing:
        return f"envtest binaries missing ({', '.join(missing)} in {bin_dir()}): run 'make envtest'"
    return None


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise EnvtestError(f"openssl {args[0]} failed: {proc.stderr.strip().splitlines()[-1:]}")


def make_pki(pki: Path, *, ca: tuple[str, str] | None = None, ip: str = "127.0.0.1") -> None:
    """Write into ``pki``: ``ca.{crt,key}``; ``apiserver.{crt,key}`` (SANs ``ip``, 127.0.0.1,
    localhost and the in-cluster names); client certificates ``admin.{crt,key}`` (CN envtest-admin, O
    system:masters) and ``kcm.{crt,key}`` (CN system:kube-controller-manager, O system:masters);
    ``kcm-serving.{crt,key}``; ``sa.key``/``sa.pub`` (ECDSA P-256: the service-account token
    signing key). All keys are ECDSA P-256, certificates valid 2 days. ``ca`` = ``(cert PEM, key
    PEM)`` signs everything instead of a generated CA (a workload cluster's CA that Cluster API
    keeps in ``<cluster>-ca``: banlieue.testing.workload). Raises EnvtestError."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2")
    if ca is None:
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=envtest-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 cwd=pki)
    else:
        (pki / "ca.crt").write_text(ca[0])
        (pki / "ca.key").write_text(ca[1])
        (pki / "ca.key").chmod(0o600)

    def leaf(name: str, subj: str, usage: str, san: str | None = None) -> None:
        ext = ["-addext", "basicConstraints=critical,CA:FALSE", "-addext", f"extendedKeyUsage={usage}",
               "-addext", "keyUsage=critical,digitalSignature"]
        if san:
            ext += ["-addext", f"subjectAltName={san}"]
        _openssl("req", "-x509", *ec, "-CA", "ca.crt", "-CAkey", "ca.key", "-keyout", f"{name}.key",
                 "-out", f"{name}.crt", "-subj", subj, *ext, cwd=pki)

    in_cluster = ",".join(f"DNS:{n}" for n in ("kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                               "kubernetes.default.svc.cluster.local"))
    ips = ",".join(f"IP:{a}" for a in dict.fromkeys((ip, "127.0.0.1")))
    leaf("apiserver", "/CN=kube-apiserver", "serverAuth", f"{ips},DNS:localhost,{in_cluster}")
    leaf("kcm-serving", "/CN=kube-controller-manager", "serverAuth", "IP:127.0.0.1,DNS:localhost")
    leaf("admin", f"/O=system:masters/CN={ADMIN_USER}", "clientAuth")
    leaf("kcm", "/O=system:masters/CN=system:kube-controller-manager", "clientAuth")
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig_dict(url: str, ca_pem: str, user: dict[str, str], *, name: str = "envtest",
                    namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig (clientcmd ``api.Config``) for ``url`` with the CA embedded and ``user`` (e.g.
    ``{"token": ...}`` or ``{"client-certificate": path, "client-key": path}``)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {
            "server": url, "certificate-authority-data": base64.b64encode(ca_pem.encode()).decode()}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
        "preferences": {},
    }


@dataclass
class _Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@dataclass
class Envtest:
    """A running envtest. ``url`` is ``https://127.0.0.1:<port>``; ``kubeconfig_path`` is a
    cluster-admin kubeconfig (client certificate in ``system:masters``); ``ca_file``/``ca_pem``
    the CA of the serving certificate; ``audit_log`` the apiserver's audit log (JSON lines)."""

    dir: Path
    url: str
    ca_file: Path
    kubeconfig_path: Path
    log_dir: Path
    pki: Path
    etcd_url: str
    kcm_url: str
    procs: list[_Proc] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()

    @property
    def audit_log(self) -> Path:
        return self.log_dir / "audit.log"

    def ssl_context(self, *, admin: bool = True) -> ssl.SSLContext:
        """TLS context trusting the envtest CA; with the admin client certificate when ``admin``."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        if admin:
            ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                timeout: float = 15.0, content_type: str = "application/json") -> tuple[int, Any]:
        """One request to the apiserver, as cluster-admin (or as the bearer of ``token``).
        Returns ``(status, decoded JSON or text)``; HTTP errors are returned, not raised;
        ``(0, None)`` = no answer."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=self.ssl_context(admin=not token)))
        try:
            with opener.open(req, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        except OSError:
            return 0, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def ensure_service_account(self, namespace: str, name: str) -> None:
        """Create the namespace (unless it exists) and the ServiceAccount (unless it exists)."""
        for path, body in ((
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}), (
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})):
            status, out = self.request("POST", path, body)
            if status not in (201, 409):
                raise EnvtestError(f"POST {path}: {status} {out}")

    def token_for(self, namespace: str, name: str, *, expiration_seconds: int = 3600,
                  audiences: list[str] | None = None) -> str:
        """A ServiceAccount token minted by the TokenRequest API (``POST .../serviceaccounts/<name>/token``);
        the ServiceAccount must exist. ``expiration_seconds`` >= 600 (the API's minimum)."""
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        status, out = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        if status != 201:
            raise EnvtestError(f"TokenRequest for {namespace}/{name}: {status} {out}")
        return str(out["status"]["token"])

    def write_token_kubeconfig(self, path: Path, token: str, *, namespace: str = "default") -> Path:
        """Write a kubeconfig authenticating with bearer ``token``; returns ``path``."""
        path.write_text(yaml.safe_dump(kubeconfig_dict(self.url, self.ca_pem, {"token": token}, namespace=namespace)))
        path.chmod(0o600)
        return path

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far (``audit.k8s.io/v1`` Event objects, stage
        ResponseComplete/Panic/ResponseStarted), oldest first (``iter_audit_events``)."""
        return list(iter_audit_events(self.audit_log))

    def forbidden(self, username_prefix: str = "system:serviceaccount:") -> list[dict[str, Any]]:
        """Audit events answered 403 for users starting with ``username_prefix``."""
        return [e for e in self.audit_events()
                if (e.get("responseStatus") or {}).get("code") == 403
                and str((e.get("user") or {}).get("username", "")).startswith(username_prefix)]

    def stop(self, *, keep_logs: bool = False) -> None:
        """SIGTERM kcm, apiserver, etcd (in that order; SIGKILL after :data:`STOP_GRACE` s), then
        remove what was written into ``dir`` (the logs too unless ``keep_logs``). Idempotent."""
        for proc in reversed(self.procs):
            terminate(proc.process, STOP_GRACE)
        self.procs.clear()
        for path in self.created:
            if keep_logs and path == self.log_dir:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        self.created.clear()


def _http_status(url: str, ctx: ssl.SSLContext) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(url, timeout=3) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def _start(env: Envtest, name: str, argv: list[str]) -> _Proc:
    log = env.log_dir / f"{name}.log"
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=sink, stdin=subprocess.DEVNULL, cwd=env.dir,
                                   start_new_session=True)
    proc = _Proc(name, process, log)
    env.procs.append(proc)
    return proc


def _wait(env: Envtest, what: str, proc: _Proc, ready: Any, deadline: float) -> None:
    """Poll ``ready()`` until true; EnvtestError naming ``proc``'s log when it exits or time runs out."""
    while True:
        for p in env.procs:
            if p.process.poll() is not None:
                raise EnvtestError(f"{p.name} exited with status {p.process.returncode} before {what}; see {p.log}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise EnvtestError(f"{what}: not within {STARTUP_TIMEOUT:g} s; see {proc.log}")
        time.sleep(0.1)


def _launch(env: Envtest, binaries: Path, api_port: int = 0, *, bind_address: str = "127.0.0.1",
            controller_manager: bool = True, audit_policy: dict[str, Any] | None = None) -> None:
    # Chosen together (distinct, all held bound until chosen); kube-apiserver's only when not given.
    etcd_port, peer_port, kcm_port, *chosen_api = free_ports(3 if api_port else 4)
    api_port = api_port or chosen_api[0]
    data = env.dir / "etcd"
    env.created.append(data)
    env.etcd_url = f"http://127.0.0.1:{etcd_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    etcd = _start(env, "etcd", [
        str(binaries / "etcd"), "--name", "envtest", "--data-dir", str(data),
        "--listen-client-urls", env.etcd_url, "--advertise-client-urls", env.etcd_url,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"envtest={peer}", "--initial-cluster-state", "new",
        "--unsafe-no-fsync", "--log-level", "warn",
    ])
    pki = env.pki
    policy_file = pki / "audit-policy.yaml"
    policy_file.write_text(yaml.safe_dump(audit_policy or AUDIT_POLICY))
    env.url = f"https://{bind_address}:{api_port}"
    apiserver = _start(env, "kube-apiserver", [
        str(binaries / "kube-apiserver"),
        "--etcd-servers", env.etcd_url,
        "--bind-address", bind_address, "--advertise-address", bind_address, "--secure-port", str(api_port),
        "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
        "--client-ca-file", str(pki / "ca.crt"),
        "--service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE,
        "--service-account-issuer", env.url,
        "--service-account-key-file", str(pki / "sa.pub"),
        "--service-account-signing-key-file", str(pki / "sa.key"),
        # The apiserver would publish its address in the "kubernetes" Endpoints, which refuse a
        # loopback IP (a logged error every 10 s); nothing here routes Service traffic anyway.
        "--endpoint-reconciler-type", "none",
        "--authorization-mode", "Node,RBAC",
        # Network rule: the apiserver dials a Node's address for exec/logs/port-forward; never a
        # hostname (the default order starts with Hostname, which is resolved through DNS).
        "--kubelet-preferred-address-types", "InternalIP",
        "--enable-admission-plugins", "NodeRestriction,OwnerReferencesPermissionEnforcement",
        "--audit-policy-file", str(policy_file), "--audit-log-path", str(env.audit_log),
        # blocking: each event is written before the answer, so a test reads what it just did.
        "--audit-log-format", "json", "--audit-log-mode", "blocking",
        "--profiling=false", "--v=1",
    ])
    kcm_kubeconfig = pki / "kcm.kubeconfig"
    kcm_kubeconfig.write_text(yaml.safe_dump(kubeconfig_dict(
        env.url, (pki / "ca.crt").read_text(),
        {"client-certificate": str(pki / "kcm.crt"), "client-key": str(pki / "kcm.key")})))
    admin_ctx = env.ssl_context()
    deadline = time.monotonic() + STARTUP_TIMEOUT
    _wait(env, "etcd serving", etcd, lambda: _plain_status(env.etcd_url + "/health") == 200, deadline)
    _wait(env, "kube-apiserver /readyz", apiserver, lambda: _http_status(env.url + "/readyz", admin_ctx) == 200,
          deadline)
    if not controller_manager:
        return
    kcm_ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    for attempt in range(1, KCM_PORT_ATTEMPTS + 1):
        env.kcm_url = f"https://127.0.0.1:{kcm_port}"
        kcm = _start(env, "kube-controller-manager", [
            str(binaries / "kube-controller-manager"),
            "--kubeconfig", str(kcm_kubeconfig),
            "--authentication-kubeconfig", str(kcm_kubeconfig), "--authorization-kubeconfig", str(kcm_kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(kcm_port),
            "--tls-cert-file", str(pki / "kcm-serving.crt"), "--tls-private-key-file", str(pki / "kcm-serving.key"),
            "--controllers", KCM_CONTROLLERS,
            "--service-account-private-key-file", str(pki / "sa.key"), "--root-ca-file", str(pki / "ca.crt"),
            "--leader-elect=false", "--use-service-account-credentials=false", "--v=1",
        ])
        try:
            _wait(env, "kube-controller-manager /healthz", kcm,
                  lambda: _http_status(env.kcm_url + "/healthz", kcm_ctx) == 200, deadline)
            break
        except EnvtestError:
            # The free port was chosen before etcd and kube-apiserver started; meanwhile an
            # outgoing loopback connection can take it as its ephemeral port (a suspected cause
            # of one kube-controller-manager exit in a loaded real-tier run, whose log was not
            # kept). Only that cause is retried, on another free port.
            if kcm.process.poll() is None or attempt == KCM_PORT_ATTEMPTS or \
                    "address already in use" not in kcm.log.read_text(errors="replace"):
                raise
            env.procs.remove(kcm)
            [kcm_port] = free_ports(1)
    _wait(env, "the default ServiceAccount (serviceaccount controller)", kcm,
          lambda: env.request("GET", "/api/v1/namespaces/default/serviceaccounts/default", timeout=3)[0] == 200,
          deadline)


KCM_PORT_ATTEMPTS = 3  # kube-controller-manager starts on another free port after "address already in use"


def _plain_status(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=3) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def up(directory: Path, *, port: int = 0, bind_address: str = "127.0.0.1", ca: tuple[str, str] | None = None,
       controller_manager: bool = True, audit_policy: dict[str, Any] | None = None) -> Envtest:
    """Start etcd, kube-apiserver (on 127.0.0.1:``port``, a free one when 0) and
    kube-controller-manager with their files in ``directory`` (created when missing) and return once all are ready (see the module docstring). On failure
    everything started is stopped, the logs are kept, and EnvtestError (one line naming the log
    file) is raised.

    For a second API server (banlieue.testing.workload): ``bind_address`` (a loopback address:
    the caller checks) is where kube-apiserver listens and what its serving certificate names;
    ``ca`` = ``(cert PEM, key PEM)`` is the CA of every certificate (``make_pki``);
    ``controller_manager=False`` starts etcd and kube-apiserver only (``kcm_url`` stays "").
    ``audit_policy``: an ``audit.k8s.io/v1`` Policy instead of :data:`AUDIT_POLICY` (the
    benchmark logs write bodies to tell writes that changed nothing)."""
    missing = envtest_binaries_missing()
    if missing:
        raise EnvtestError(missing)
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    env = Envtest(dir=directory, url="", ca_file=directory / "pki/ca.crt", kubeconfig_path=directory / "kubeconfig",
                  log_dir=directory / "logs", pki=directory / "pki", etcd_url="", kcm_url="")
    for path in (env.pki, env.log_dir):
        if path.exists():
            raise EnvtestError(f"{path} exists: another envtest may be using {directory}")
        path.mkdir()
        env.created.append(path)
    try:
        make_pki(env.pki, ca=ca, ip=bind_address)
        _launch(env, bin_dir(), port, bind_address=bind_address, controller_manager=controller_manager,
                audit_policy=audit_policy)
        env.created.append(env.kubeconfig_path)
        env.kubeconfig_path.write_text(yaml.safe_dump(kubeconfig_dict(
            env.url, env.ca_pem,
            {"client-certificate-data": base64.b64encode((env.pki / "admin.crt").read_bytes()).decode(),
             "client-key-data": base64.b64encode((env.pki / "admin.key").read_bytes()).decode()})))
        env.kubeconfig_path.chmod(0o600)
    except BaseException:
        env.stop(keep_logs=True)
        raise
    return env


def iter_audit_events(audit_log: Path) -> Iterator[dict[str, Any]]:
    """The events of ``audit_log`` and of the files kube-apiserver rotated it into
    (``audit-<time>.log`` beside it, every 100 MB by default: a 1,000-machine benchmark writes
    several), oldest first, one at a time."""
    rotated = sorted(audit_log.parent.glob(f"{audit_log.stem}-*{audit_log.suffix}"))
    for path in (*rotated, audit_log):
        with contextlib.suppress(FileNotFoundError), path.open() as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    yield json.loads(line)


@contextlib.contextmanager
def start_envtest(directory: Path | None = None, *, keep_logs: bool = False,
                  audit_policy: dict[str, Any] | None = None) -> Iterator[Envtest]:
    """:func:`up` as a context manager (a temporary directory when ``directory`` is None);
    stopped on exit (the logs kept when ``keep_logs``); ``audit_policy`` as for :func:`up`."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="envtest-")))
        env = up(directory, audit_policy=audit_policy)
        try:
            yield env
        finally:
            env.stop(keep_logs=keep_logs)
