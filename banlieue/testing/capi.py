"""Real Cluster API (core, kubeadm bootstrap, kubeadm control plane) as processes on a real
kube-apiserver, for the CAPI test tier and ``banlieue dev --capi``.

Sources, all from the same pinned module (``hack/capi/go.mod``, Cluster API v1.14.2):

* binaries ``bin/capi-manager``, ``bin/capi-kubeadm-bootstrap-manager``,
  ``bin/capi-kubeadm-control-plane-manager`` and ``bin/clusterctl`` (``make capi``);
* CRDs, RBAC and webhook configurations rendered from the module's ``<component>/config/default``
  by ``kubectl kustomize`` (which adds the ``cluster.x-k8s.io/v1beta2`` contract labels), located
  with ``go list -m -f {{.Dir}} sigs.k8s.io/cluster-api`` inside ``hack/capi``.

What ``CapiEnvironment.start`` does to the rendered documents before ``kubectl apply
--server-side``: the Deployment, Service and cert-manager Certificate/Issuer are dropped (the
managers run here as processes, there is no cert-manager); every webhook ``clientConfig.service``
(admission configurations and CRD conversion) becomes ``url: https://127.0.0.1:<port><path>`` with
the ``caBundle`` of a CA generated for the run (``openssl``), and the cert-manager
``inject-ca-from`` annotations are removed. Each manager then runs with a kubeconfig holding a
TokenRequest token of its own ServiceAccount, so its own ``config/rbac`` is all it may do
(``rbac="admin"`` uses the given kubeconfig instead).

Network rule: every address given to a manager is on 127.0.0.1 (webhook URLs, ``--health-addr``,
``--diagnostics-address``); ``check_loopback`` refuses any other endpoint before anything starts.
Known limit: controller-runtime's webhook server takes only a port from CAPI's flags (v1.14.2 has
no host flag), so it listens on every interface of this network namespace; only the API server
(on 127.0.0.1) ever dials it.

Command line: ``python -m banlieue.testing.capi up --kubeconfig KUBECONFIG --dir DIR`` starts the
managers on an existing API server (as cluster-admin in KUBECONFIG), prints one line when all three
are ready, and stops them on SIGTERM/SIGINT. ``python -m banlieue.testing.capi render --dir DIR``
prints the rewritten documents (what the suite applies; the certificate goes to DIR).
``python -m banlieue.testing.capi install-banlieue --kubeconfig KUBECONFIG`` installs banlieue as
the suite does (``install_banlieue``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from banlieue.cmd.dev import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
MODULE_DIR = REPO_ROOT / "hack" / "capi"
CAPI_MODULE = "sigs.k8s.io/cluster-api"
GO_ENV = {"GO111MODULE": "on", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
DROPPED_KINDS = frozenset({"Deployment", "Service", "Certificate", "Issuer"})
CA_INJECT_ANNOTATION = "cert-manager.io/inject-ca-from"
READY_TIMEOUT = 90.0  # seconds for all three managers to answer /readyz (cache sync + webhook server)
STOP_TIMEOUT = 15.0  # seconds after SIGTERM before SIGKILL
TOKEN_DURATION = "48h"  # TokenRequest lifetime of each manager's kubeconfig (longer than any test run)


TOPOLOGY_ENDPOINT_VARIABLE = "controlPlaneEndpointHost"
"""The variable of banlieue's ClusterClass (templates/clusterclass-banlieue.yaml) that becomes the
VSphereCluster's ``spec.controlPlaneEndpoint.host``."""


class CapiUnavailable(RuntimeError):
    """A binary of ``make capi`` is missing, or the module cache lacks the pinned module."""


class NetworkRuleViolation(AssertionError):
    """An endpoint handed to CAPI or banlieue is not on loopback (127.0.0.0/8)."""


@dataclass(frozen=True)
class Component:
    """One CAPI manager: its binary in ``bin/``, its kustomization in the module, the namespace
    and ServiceAccount its ``config/default`` creates, and its feature gates."""

    name: str
    binary: str
    config_dir: str
    namespace: str
    service_account: str
    feature_gates: str


COMPONENTS: tuple[Component, ...] = (
    Component("core", "capi-manager", "core/config/default", "capi-system", "capi-manager",
              "ClusterTopology=true,MachinePool=false"),
    Component("bootstrap-kubeadm", "capi-kubeadm-bootstrap-manager", "bootstrap/kubeadm/config/default",
              "capi-kubeadm-bootstrap-system", "capi-kubeadm-bootstrap-manager", "MachinePool=false"),
    Component("control-plane-kubeadm", "capi-kubeadm-control-plane-manager", "controlplane/kubeadm/config/default",
              "capi-kubeadm-control-plane-system", "capi-kubeadm-control-plane-manager",
              "ClusterTopology=true,MachinePool=false"),
)


# -- network rule ---------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """True for an IP literal in 127.0.0.0/8 (or ::1) and for ``localhost``; hostnames are not
    resolved (a name could point anywhere later)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(url: str) -> str:
    return urllib.parse.urlsplit(url).hostname or ""


def loopback_violations(objs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every non-loopback endpoint in ``objs`` (Kubernetes objects as dicts), one line each:
    ``spec.controlPlaneEndpoint.host`` of any object (Cluster, VSphereCluster, …) and
    ``spec.template.spec.controlPlaneEndpoint.host`` of a template (VSphereClusterTemplate), a topology
    Cluster's ``controlPlaneEndpointHost`` variable (``TOPOLOGY_ENDPOINT_VARIABLE``), a Provider's
    ``spec.connection.endpoint``, the ``clientConfig.url`` of admission webhooks and of CRD
    conversion webhooks (a ``clientConfig.service`` is a violation too: it would be dialled
    through a cluster Service address)."""
    out: list[str] = []
    for obj in objs:
        kind, name = obj.get("kind", "?"), (obj.get("metadata") or {}).get("name", "?")
        spec = obj.get("spec") or {}
        template_spec = (spec.get("template") or {}).get("spec") or {}
        for path, where in (("spec", spec), ("spec.template.spec", template_spec)):  # an object, or a template of one
            cpe = where.get("controlPlaneEndpoint") or {}
            if cpe.get("host") and not is_loopback(str(cpe["host"])):
                out.append(f"{kind}/{name}: {path}.controlPlaneEndpoint.host {cpe['host']!r} is not on loopback (127.0.0.0/8)")
        for variable in (spec.get("topology") or {}).get("variables") or () if kind == "Cluster" else ():
            # A topology Cluster gives its endpoint to the ClusterClass as a variable, which a patch
            # writes into the VSphereCluster (templates/clusterclass-banlieue.yaml).
            if variable.get("name") == TOPOLOGY_ENDPOINT_VARIABLE and not is_loopback(str(variable.get("value", ""))):
                out.append(f"{kind}/{name}: spec.topology.variables[{TOPOLOGY_ENDPOINT_VARIABLE}] {variable.get('value')!r} "
                           "is not on loopback (127.0.0.0/8)")
        endpoint = (spec.get("connection") or {}).get("endpoint") if kind == "Provider" else None
        if endpoint and not is_loopback(_url_host(str(endpoint)) or str(endpoint).split(":")[0]):
            out.append(f"{kind}/{name}: spec.connection.endpoint {endpoint!r} is not on loopback (127.0.0.0/8)")
        configs: list[tuple[str, Mapping[str, Any]]] = []
        if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            configs = [(f"webhooks[{w.get('name')}]", w.get("clientConfig") or {}) for w in obj.get("webhooks") or ()]
        elif kind == "CustomResourceDefinition":
            webhook = (spec.get("conversion") or {}).get("webhook") or {}
            if webhook:
                configs = [("spec.conversion.webhook", webhook.get("clientConfig") or {})]
        for where, cc in configs:
            if "service" in cc:
                out.append(f"{kind}/{name}: {where}.clientConfig.service would be dialled off loopback; use url: https://127.0.0.1:PORT/...")
            elif not is_loopback(_url_host(str(cc.get("url", "")))):
                out.append(f"{kind}/{name}: {where}.clientConfig.url {cc.get('url')!r} is not on loopback (127.0.0.0/8)")
    return out


def check_loopback(objs: Iterable[Mapping[str, Any]]) -> None:
    """Raise NetworkRuleViolation listing every non-loopback endpoint (``loopback_violations``).

    The network rule of the test suite: nothing a test starts dials an address off this machine
    (docs/decisions/0006-test-doubles.md; issue 17)."""
    bad = loopback_violations(objs)
    if bad:
        raise NetworkRuleViolation("network rule: refusing to start CAPI on non-loopback endpoints:\n  " + "\n  ".join(bad))


# -- rendering ------------------------------------------------------------------------------------


def module_dir() -> Path:
    """The module cache directory of the pinned ``sigs.k8s.io/cluster-api`` (``go list -m``
    inside ``hack/capi``; downloads into the shared module cache when missing).

    Raises CapiUnavailable when ``go`` is missing or the module cannot be listed."""
    go = shutil.which("go")
    if go is None:
        raise CapiUnavailable("go is not installed: the CAPI configuration comes from the Go module cache (make capi)")
    proc = subprocess.run([go, "list", "-m", "-f", "{{.Dir}}", CAPI_MODULE], cwd=MODULE_DIR, env={**os.environ, **GO_ENV},
                          capture_output=True, text=True, check=False)
    path = proc.stdout.strip()
    if proc.returncode != 0 or not path:
        raise CapiUnavailable(f"go list -m {CAPI_MODULE} in {MODULE_DIR} failed: {proc.stderr.strip() or 'no module directory'}")
    return Path(path)


def kustomize(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH`` parsed into documents (the module cache is read only: kustomize
    only reads). Raises CapiUnavailable when kubectl is missing, RuntimeError when it fails."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise CapiUnavailable("kubectl is required (its built-in kustomize renders CAPI's config/)")
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path}: {proc.stderr.strip()}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def rewrite(docs: Sequence[Mapping[str, Any]], webhook_port: int, ca_pem: str) -> list[dict[str, Any]]:
    """``docs`` without ``DROPPED_KINDS``, every webhook ``clientConfig.service`` replaced by
    ``url: https://127.0.0.1:<webhook_port><service.path>`` + ``caBundle`` (base64 of ``ca_pem``),
    cert-manager CA-injection annotations removed. Input documents are not modified."""
    ca_bundle = base64.b64encode(ca_pem.encode()).decode()

    def client_config(cc: Mapping[str, Any]) -> dict[str, Any]:
        service = cc.get("service") or {}
        return {"url": f"https://127.0.0.1:{webhook_port}{service.get('path') or '/'}", "caBundle": ca_bundle}

    out = []
    for src in docs:
        if src.get("kind") in DROPPED_KINDS:
            continue
        doc = json.loads(json.dumps(src))
        annotations = doc.get("metadata", {}).get("annotations") or {}
        annotations.pop(CA_INJECT_ANNOTATION, None)
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in doc.get("webhooks") or ():
                webhook["clientConfig"] = client_config(webhook.get("clientConfig") or {})
        elif doc["kind"] == "CustomResourceDefinition":
            webhook = ((doc.get("spec") or {}).get("conversion") or {}).get("webhook")
            if webhook:
                webhook["clientConfig"] = client_config(webhook.get("clientConfig") or {})
        out.append(doc)
    return out


# -- certificates ---------------------------------------------------------------------------------


def generate_serving_cert(directory: Path) -> str:
    """A CA and a serving certificate for IP 127.0.0.1 (``directory/tls.crt``, ``tls.key``,
    ``ca.crt``; ECDSA P-256, 2 days) made with ``openssl``; returns the CA PEM.

    Raises CapiUnavailable when openssl is missing, CalledProcessError when it fails."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CapiUnavailable("openssl is required to make the webhook serving certificate")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
        "-subj", "/CN=banlieue-test-capi-webhook-ca", "-keyout", "ca.key", "-out", "ca.crt")
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", "tls.key", "-out", "tls.csr")
    (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-extfile", "san.ext", "-out", "tls.crt")
    return (directory / "ca.crt").read_text()


# -- processes ------------------------------------------------------------------------------------


def binary(name: str) -> Path:
    """``$BANLIEUE_CAPI_BIN_DIR/<name>`` or ``<repo>/bin/<name>``; CapiUnavailable when missing."""
    path = Path(os.environ.get("BANLIEUE_CAPI_BIN_DIR") or REPO_ROOT / "bin") / name
    if not path.is_file():
        raise CapiUnavailable(f"{path} is missing: run `make capi`")
    return path


def binaries_missing() -> str | None:
    """None when every ``make capi`` binary exists, else a skip reason naming the missing ones."""
    directory = Path(os.environ.get("BANLIEUE_CAPI_BIN_DIR") or REPO_ROOT / "bin")
    names = [c.binary for c in COMPONENTS] + ["clusterctl"]
    missing = [n for n in names if not os.access(directory / n, os.X_OK)]
    return f"CAPI binaries missing ({', '.join(missing)} in {directory}): run 'make capi'" if missing else None


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    """Run ``kubectl --kubeconfig KUBECONFIG ARGS``; RuntimeError with its stderr on failure."""
    proc = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def install_banlieue(kubeconfig: Path) -> None:
    """banlieue's CRDs, RBAC and admission policies as an operator installs them: ``kubectl
    kustomize config/default`` without the Deployment and Service (the manager runs as a
    process), ``kubectl apply --server-side``; then every CRD Established (60 s).
    Raises RuntimeError with kubectl's stderr."""
    rendered = kubectl(kubeconfig, "kustomize", str(REPO_ROOT / "config" / "default"))
    docs = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") not in ("Deployment", "Service")]
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs))
    crds = [f"crd/{d['metadata']['name']}" for d in docs if d["kind"] == "CustomResourceDefinition"]
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", *crds)


def token_kubeconfig(admin: Path, namespace: str, service_account: str, out: Path) -> Path:
    """A kubeconfig for ``system:serviceaccount:<namespace>:<service_account>``: the cluster of
    ``admin``'s current context with a TokenRequest token (``kubectl create token``)."""
    cfg = yaml.safe_load(admin.read_text())
    ctx_name = cfg.get("current-context")
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    token = kubectl(admin, "create", "token", service_account, "-n", namespace, "--duration", TOKEN_DURATION).strip()
    user = f"{namespace}-{service_account}"
    out.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}], "current-context": user,
    }))
    out.chmod(0o600)
    return out


@dataclass
class ManagerProcess:
    component: Component
    process: subprocess.Popen[bytes]
    log_path: Path
    health_port: int
    webhook_port: int
    diagnostics_port: int

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class CapiEnvironment:
    """The three CAPI managers against the API server of ``kubeconfig`` (cluster-admin: it
    installs CRDs, RBAC and webhook configurations). ``workdir`` receives the certificates, the
    rendered documents (``<component>.yaml``), the managers' kubeconfigs and logs
    (``<component>.log``)."""

    kubeconfig: Path
    workdir: Path
    rbac: str = "own"  # "own": each manager's ServiceAccount token; "admin": ``kubeconfig``
    managers: list[ManagerProcess] = field(default_factory=list)
    documents: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    webhook_ports: dict[str, int] = field(default_factory=dict)

    def render(self) -> dict[str, list[dict[str, Any]]]:
        """Render and rewrite each component's configuration (ports chosen now); returns
        component name -> documents, also written to ``workdir/<name>.yaml``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca_pem = generate_serving_cert(self.workdir / "certs")
        root = module_dir()
        for comp, port in zip(COMPONENTS, free_ports(len(COMPONENTS)), strict=True):
            docs = rewrite(kustomize(root / comp.config_dir), port, ca_pem)
            self.documents[comp.name] = docs
            (self.workdir / f"{comp.name}.yaml").write_text(yaml.safe_dump_all(docs))
            self.webhook_ports[comp.name] = port
        return self.documents

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        """Render, check the network rule, apply (server-side), start the managers and wait
        until each answers ``/readyz``. Raises CapiUnavailable (a binary or tool missing),
        NetworkRuleViolation, RuntimeError (apply failed, a manager exited or did not get ready:
        the message names its log file)."""
        bins = {c.name: binary(c.binary) for c in COMPONENTS}
        self.render()
        check_loopback([d for docs in self.documents.values() for d in docs])
        for comp in COMPONENTS:
            # CRDs, namespaces, RBAC and webhook configurations of one component in one apply.
            kubectl(self.kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(self.workdir / f"{comp.name}.yaml"))
        # Every manager's health and diagnostics port chosen at once, distinct, and none a
        # webhook port (those are closed until the managers start: the OS may hand them out again).
        ports = iter([p for p in free_ports(2 * len(COMPONENTS) + len(self.webhook_ports))
                      if p not in self.webhook_ports.values()])
        for comp in COMPONENTS:
            kubeconfig = self.kubeconfig if self.rbac == "admin" else token_kubeconfig(
                self.kubeconfig, comp.namespace, comp.service_account, self.workdir / f"{comp.name}.kubeconfig")
            health, diagnostics = next(ports), next(ports)
            log_path = self.workdir / f"{comp.name}.log"
            args = [str(bins[comp.name]), "--kubeconfig", str(kubeconfig),
                    "--webhook-port", str(self.webhook_ports[comp.name]), "--webhook-cert-dir", str(self.workdir / "certs"),
                    "--health-addr", f"127.0.0.1:{health}", "--diagnostics-address", f"127.0.0.1:{diagnostics}",
                    "--insecure-diagnostics", "--feature-gates", comp.feature_gates, "--v", "2"]
            with log_path.open("wb") as sink:
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True)
            self.managers.append(ManagerProcess(comp, proc, log_path, health, self.webhook_ports[comp.name], diagnostics))
        deadline = time.monotonic() + timeout
        pending = list(self.managers)
        while pending:
            for m in list(pending):
                if m.process.poll() is not None:
                    raise RuntimeError(f"{m.component.binary} exited with {m.process.returncode} (log: {m.log_path}):\n{m.tail()}")
                if m.ready():
                    pending.remove(m)
            if pending and time.monotonic() > deadline:
                m = pending[0]
                raise RuntimeError(f"{m.component.binary} not ready within {timeout:g} s (log: {m.log_path}):\n{m.tail()}")
            time.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM every manager, SIGKILL after ``STOP_TIMEOUT`` s."""
        for m in self.managers:
            if m.process.poll() is None:
                m.process.terminate()
        for m in self.managers:
            try:
                m.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                m.process.kill()
                m.process.wait()

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- {m.log_path}\n{m.tail(lines)}" for m in self.managers)

    def __enter__(self) -> CapiEnvironment:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def capi_environment(kubeconfig: Path, workdir: Path, rbac: str = "own") -> Iterator[CapiEnvironment]:
    env = CapiEnvironment(kubeconfig=kubeconfig, workdir=workdir, rbac=rbac)
    try:
        env.start()
        yield env
    finally:
        env.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m banlieue.testing.capi", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the three CAPI managers on the API server of --kubeconfig")
    up.add_argument("--kubeconfig", type=Path, required=True, help="cluster-admin kubeconfig of a loopback API server")
    up.add_argument("--dir", type=Path, required=True, help="work directory (certificates, rendered YAML, logs)")
    up.add_argument("--rbac", choices=("own", "admin"), default="own")
    install = sub.add_parser("install-banlieue", help="apply config/default minus the Deployment and Service (server-side)")
    install.add_argument("--kubeconfig", type=Path, required=True)
    render = sub.add_parser("render", help="print the rewritten CAPI documents (webhooks on 127.0.0.1)")
    render.add_argument("--dir", type=Path, required=True, help="where the generated certificate goes")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "install-banlieue":
            install_banlieue(args.kubeconfig)
            print("capi: banlieue's CRDs, RBAC and admission policies installed", flush=True)
            return 0
        if args.cmd == "render":
            env = CapiEnvironment(kubeconfig=Path(os.devnull), workdir=args.dir)
            for docs in env.render().values():
                sys.stdout.write(yaml.safe_dump_all(docs, explicit_start=True))
            return 0
        env = CapiEnvironment(kubeconfig=args.kubeconfig, workdir=args.dir, rbac=args.rbac)
        stop = False

        def on_signal(*_: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            env.start()
            print(f"capi: core, kubeadm bootstrap and control plane managers ready (logs in {args.dir})", flush=True)
            while not stop and all(m.process.poll() is None for m in env.managers):
                time.sleep(0.5)
        finally:
            env.stop()
        dead = [m for m in env.managers if m.process.returncode not in (0, -signal.SIGTERM)]
        if dead and not stop:
            print(f"capi: {dead[0].component.binary} exited with {dead[0].process.returncode} (log: {dead[0].log_path})", file=sys.stderr)
            return 1
        return 0
    except (CapiUnavailable, RuntimeError, NetworkRuleViolation) as e:
        print(f"capi: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
