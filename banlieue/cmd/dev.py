"""``banlieue dev``: API-server double + vcsim + ``banlieue manager`` on 127.0.0.1 (``make dev``).

Stages, one progress line each (``[1/7] starting API server double ... ok (0.4 s)``):

1. the API-server double (``python -m banlieue.testing.apiserver --state-file
   <state>/apiserver-state.json``: it saves its objects there; a run without ``--keep-state``
   removes the previous file first, a run with it starts from it), log ``apiserver.log``; with
   ``--apiserver real`` instead etcd + kube-apiserver + kube-controller-manager from ``make
   envtest`` (``python -m banlieue.testing.envtest up --dir <state>/envtest``, log
   ``envtest.log``, the components' logs in ``envtest/logs/``; kubeconfig: cluster-admin);
2. one vcsim per sample Provider (``vcenter-a``, ``vcenter-b``: 2 datacenters x 3 clusters,
   template ``ubuntu-22.04``, TLS with a generated CA), state and log in ``vcsim-<provider>/``;
   each plays DHCP and VMware Tools (``--guest-ip``, ``hack/vcsim/guestnet.go``: a guest that
   powers on reports its static address, else one leased from ``GUEST_IP_RANGES``, one
   documentation range per simulator; vcsim guests report none on their own), then every
   ``--vcsim-arg`` (e.g. ``-method-delay=CloneVM_Task=5000``);
3. ``<state-dir>/kubeconfig`` and the CRDs (every ``config/crd/*.yaml`` through ``kubectl apply``;
   the ``Kustomization`` is not a CRD and is skipped); with kept state, the VSphereMachines that
   VirtualMachines own are deleted (``reclone_kept_vms``: the simulators start without the VMs);
4. ``banlieue manager --leader-elect`` with that kubeconfig, log ``manager.log``, metrics and
   probes on 127.0.0.1 (the configured port when free, else a free one), until ``/readyz`` is 200;
5. ``config/samples/*.yaml`` through ``kubectl apply -f -``, each Provider's endpoint and CA
   rewritten (in memory) to its vcsim's URL and CA certificate; in dependency order, the
   VirtualMachines last, once every Provider and VMImage is Ready (no transient failure);
6. wait (at most ``READY_TIMEOUT`` seconds) until every sample VirtualMachine is Ready, printing
   the phases as they change;
7. ``kubectl get bvm,vsm,bprov``.

With ``--capi`` (implies ``--apiserver real``; ``make capi`` first) stage 3 installs banlieue as an
operator does (``config/default`` without the Deployment and Service: CRDs with CAPI's contract
labels, RBAC, admission policies; banlieue.testing.capi.install_banlieue), and a stage after it
starts real Cluster API v1.14.2 (``python -m banlieue.testing.capi up``: core, kubeadm bootstrap
and control-plane managers as processes, webhooks on 127.0.0.1, each with its own RBAC; log
``capi.log``, the managers' logs in ``capi/``) and writes the release as a clusterctl local
repository in ``clusterctl/`` (``hack/release.sh`` with ``REPO_DIR``; banlieue.testing.clusterctl).
The usage text then shows a ``clusterctl generate cluster … | kubectl apply -f -`` line for it.

Then it prints how to use kubectl against it and runs until Ctrl-C/SIGTERM (``--exit-when-ready``:
exits 0 at once), supervising its children (docs/dev.md): a manager that dies is started again
with the same flags (its log kept as ``manager.log.1``, up to ``LOGS_KEPT``); a simulator that
dies is started again on its port with the same inventory and instance UUID (the VMs cloned into it are gone; its
new CA is written to the Provider's ``caBundle``); the API server's death ends dev (the double's
objects stay in its state file); so does a child that crash-loops (``RESTART_LIMIT``). Each
child's process ID is in ``<log stem>.pid`` (``manager.pid``) while it runs (a dev killed with
SIGKILL leaves them: the next dev with that state directory removes them first). Children's
``TMPDIR`` is ``<state-dir>/tmp``, removed at exit, so nothing is left in /tmp.

A failing stage raises StartupError naming the stage, the reason and the log; every child is
stopped on exit (manager first, so it releases its Leases; SIGTERM, then SIGKILL).
Children run in their own session (a terminal's Ctrl-C reaches only this process, which stops
them in order) and get SIGTERM should this process die (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import structlog
import yaml

from banlieue.options import DevOptions, StartupError, split_bind_address
from banlieue.reconcilers.kinds import LABEL_OWNED_BY
from banlieue.reconcilers.metrics import READY, phase_of
from banlieue.testing.guestnet import GUEST_IP_RANGES, GuestNetwork, static_address  # noqa: F401  (tests/chaos imports them from here)

REPO_ROOT = Path(__file__).resolve().parents[2]
STAGES = 7
READY_TIMEOUT = 180.0
"""Seconds stage 6 waits for the sample VirtualMachines (clones in vcsim take about a second)."""
STARTUP_TIMEOUT = 60.0
"""Seconds a child (API double, vcsim, manager) may take to report that it is up."""
STOP_TIMEOUT = 40.0
"""Seconds a child may take to exit after SIGTERM (the manager drains up to 30 s)."""
log = structlog.get_logger("banlieue.cmd.dev")
KUBECTL_FALLBACK = Path("/usr/lib/google-cloud-sdk/bin/kubectl")
VM_PATH = "/apis/banlieue.io/v1alpha1/virtualmachines"
VCSIM_FLAGS = ("--dc=2", "--cluster=3", "--host=4", "--templates=ubuntu-22.04")
"""Each simulated vCenter: 2 datacenters x 3 clusters; 4 hosts per cluster (vcsim hosts have 4 GiB
each, so a cluster has the 8 GiB free the sample class ``medium`` needs); template ``ubuntu-22.04``."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


API_STATE_FILE = "apiserver-state.json"
"""The API-server double's objects in the state directory (``banlieue dev --keep-state``)."""
LOGS_KEPT = 5
"""How many earlier logs of a child are kept (``manager.log.1`` is the newest, ``.5`` the oldest)."""
RESTART_LIMIT = 5
"""A child that exits more than this many times within RESTART_WINDOW seconds is not restarted
again: dev stops (a crash loop would otherwise scroll the cause away)."""
RESTART_WINDOW = 120.0


def rotate_log(log: Path, kept: int = LOGS_KEPT) -> Path | None:
    """Move ``log`` to ``log.1`` (``log.1`` to ``log.2`` ... dropping ``log.<kept>``); returns the
    path the old log now has, or None when there was no log (or it was empty)."""
    if not log.is_file() or log.stat().st_size == 0:
        return None
    for n in range(kept - 1, 0, -1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            older.replace(log.with_name(f"{log.name}.{n + 1}"))
    first = log.with_name(f"{log.name}.1")
    log.replace(first)
    return first


def describe_exit(code: int) -> str:
    """``exited with code 3`` or ``was killed by SIGKILL`` for a Popen return code."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


@dataclass
class Child:
    """A started child process: how to start it again, its log and (for the API double) its
    stdout pipe. ``restartable`` children are restarted by :meth:`Children.restart` when they die
    once dev is ready; the others end dev. ``exits`` holds the monotonic times of its deaths."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str]
    cwd: Path | None = None
    restartable: bool = False
    pid_file: Path | None = None
    started: float = field(default_factory=time.monotonic)
    exits: list[float] = field(default_factory=list)

    def first_line(self, timeout: float) -> str | None:
        """The first line the child prints on its stdout pipe (``stdout_pipe=True``), stripped;
        None when nothing comes within ``timeout`` seconds (an empty string: it closed stdout)."""
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=timeout):
                return None
        return self.process.stdout.readline().decode(errors="replace").strip()

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of the log, for error messages; when the log holds a Go flag
        package's usage text (``Usage of ...``), the lines before it instead: the cause (``flag
        provided but not defined: -foo``, ``invalid value ...``), not the end of the help."""
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        usage = next((i for i, line in enumerate(text) if line.startswith("Usage of ")), None)
        text = text[:usage][-lines:] if usage else text[-lines:]
        return " | ".join(line.strip() for line in text if line.strip())


@dataclass
class Children:
    """Every child started so far; :meth:`stop_all` stops them in reverse order. Every child gets
    ``env`` (dev sets ``TMPDIR`` to a directory of the state dir: a killed simulator leaves its
    temporary datastore directories there, not in /tmp)."""

    started: list[Child] = field(default_factory=list)
    env: dict[str, str] | None = None

    def start(self, name: str, argv: list[str], log: Path, *, stdout_pipe: bool = False,
              cwd: Path | None = None, restartable: bool = False) -> Child:
        """Start ``argv`` with stderr (and stdout unless piped) written to ``log``; an earlier
        ``log`` (a previous run's) is kept as ``log.1`` (:func:`rotate_log`). Its process ID is
        written to ``pid_file(log)`` (``manager.log`` -> ``manager.pid``) at every (re)start, so a
        user can signal exactly this environment's child (``kill -9 $(cat .banlieue/manager.pid)``);
        :meth:`stop_all` removes it."""
        log.parent.mkdir(parents=True, exist_ok=True)
        rotate_log(log)
        child = Child(name, self._popen(argv, log, stdout_pipe, cwd), log, list(argv), cwd, restartable,
                      pid_file(log))
        self.started.append(child)
        _write_pid(child)
        return child

    def _popen(self, argv: list[str], log: Path, stdout_pipe: bool, cwd: Path | None) -> subprocess.Popen[bytes]:
        with log.open("wb") as sink:
            return subprocess.Popen(
                argv, stdout=subprocess.PIPE if stdout_pipe else sink, stderr=sink, stdin=subprocess.DEVNULL,
                cwd=cwd, env=self.env, start_new_session=True, preexec_fn=_die_with_parent,
            )

    def check(self) -> None:
        """Raise StartupError when a child has exited."""
        for child in self.started:
            code = child.process.poll()
            if code is not None:
                raise StartupError(f"{child.name} {describe_exit(code)} (log {child.log}): {child.tail(5)}")

    def exited(self) -> list[Child]:
        """The children that have exited, restartable or not (they stay in :attr:`started`)."""
        return [c for c in self.started if c.process.poll() is not None]

    def restart(self, child: Child) -> Path | None:
        """Start ``child.argv`` again (same cwd, environment and log path; the old log moves to ``.1``).
        Returns where the old log went. Raises StartupError when the child has died more than
        RESTART_LIMIT times within RESTART_WINDOW seconds."""
        now = time.monotonic()
        child.exits = [t for t in child.exits if now - t < RESTART_WINDOW] + [now]
        if len(child.exits) > RESTART_LIMIT:
            raise StartupError(f"{child.name} exited {len(child.exits)} times within {RESTART_WINDOW:g} s; "
                               f"not restarting it (log {child.log}): {child.tail(5)}")
        kept = rotate_log(child.log)
        child.process = self._popen(child.argv, child.log, False, child.cwd)
        child.started = now
        _write_pid(child)
        return kept

    def stop_all(self) -> None:
        """SIGTERM each child (newest first), wait up to STOP_TIMEOUT s, then SIGKILL."""
        for child in reversed(self.started):
            process = child.process
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()
            if child.pid_file is not None:
                child.pid_file.unlink(missing_ok=True)
        self.started.clear()


def pid_file(log: Path) -> Path:
    """Where the process ID of the child logging to ``log`` is written: ``log`` with suffix ``.pid``."""
    return log.with_suffix(".pid")


def _write_pid(child: Child) -> None:
    if child.pid_file is not None:
        child.pid_file.write_text(f"{child.process.pid}\n", encoding="utf-8")


class Progress:
    """Prints ``[i/7] title ... ok (x s)`` lines; detail lines in between repeat the title."""

    def __init__(self, out: IO[str], total: int = STAGES) -> None:
        self.out = out
        self.total = total
        self.index = 0
        self._detail = False

    def detail(self, text: str) -> None:
        """A line under the running stage."""
        if not self._detail:
            self.out.write("\n")
            self._detail = True
        self.out.write(f"      {text}\n")
        self.out.flush()

    @contextlib.contextmanager
    def stage(self, title: str) -> Iterator[list[str]]:
        """One stage; yields a list the stage may append notes to (printed after ``ok``).
        A StartupError inside gets the stage's name prepended."""
        self.index += 1
        self._detail = False
        prefix = f"[{self.index}/{self.total}] {title} ..."
        self.out.write(prefix + " ")
        self.out.flush()
        started = time.monotonic()
        notes: list[str] = []
        try:
            yield notes
        except StartupError as err:
            self._finish(prefix, f"failed ({time.monotonic() - started:.1f} s)")
            raise StartupError(f"stage {self.index}/{self.total} ({title}) failed: {err}") from None
        except BaseException:
            self._finish(prefix, f"interrupted ({time.monotonic() - started:.1f} s)")
            raise
        self._finish(prefix, f"ok ({time.monotonic() - started:.1f} s)" + (": " + ", ".join(notes) if notes else ""))

    def _finish(self, prefix: str, result: str) -> None:
        self.out.write(f"{prefix} {result}\n" if self._detail else f"{result}\n")
        self.out.flush()


# --- small helpers ------------------------------------------------------------------------------


PORT_RANGE_ENV = "BANLIEUE_PORT_RANGE"
PORT_RANGE_ATTEMPTS = 256  # random candidates tried in $BANLIEUE_PORT_RANGE before giving up


def port_range() -> range | None:
    """``$BANLIEUE_PORT_RANGE`` (``LOW-HIGH``, both included) as a range of ports, or None when
    it is unset or empty. Raises ValueError naming the variable when it is not ``LOW-HIGH`` with
    ``1 <= LOW <= HIGH <= 65535``.

    Set, it is where :func:`free_port` and :func:`free_ports` choose, instead of letting the OS
    choose from its ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 on Linux).
    A port is chosen now and bound later by another process (etcd, a manager): meanwhile the OS
    may give it away as the local port of an outgoing connection, or to another process that
    asks for port 0. A range below the ephemeral one is never given away, and the workers of a
    parallel ``make test`` each get their own (``tests/parallel_plan.py``), so they never choose
    one another's ports."""
    spec = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not spec:
        return None
    low_s, _, high_s = spec.partition("-")
    try:
        low, high = int(low_s), int(high_s)
    except ValueError:
        low = high = 0
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={spec!r}: expected LOW-HIGH with 1 <= LOW <= HIGH <= 65535, e.g. 20000-25999")
    return range(low, high + 1)


def _bind_free(sock: socket.socket, host: str) -> None:
    """Bind ``sock`` to a free port of ``host``: one the OS chooses, or a random one of
    :func:`port_range` when set (OSError EADDRINUSE after :data:`PORT_RANGE_ATTEMPTS` taken ones)."""
    ports = port_range()
    if ports is None:
        sock.bind((host, 0))
        return
    for port in random.sample(ports, min(len(ports), PORT_RANGE_ATTEMPTS)):
        try:
            sock.bind((host, port))
            return
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                raise
    raise OSError(errno.EADDRINUSE, f"no free port on {host} in {PORT_RANGE_ENV}={ports.start}-{ports.stop - 1}")


def free_port(host: str = "127.0.0.1", preferred: int = 0) -> int:
    """``preferred`` when it can be bound on ``host`` now, else a free port chosen by the OS (or
    in ``$BANLIEUE_PORT_RANGE``, :func:`port_range`)."""
    for port in ((preferred, 0) if preferred else (0,)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                if port:
                    s.bind((host, port))
                else:
                    _bind_free(s, host)
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise StartupError(f"no free port on {host}")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free ports on ``host``, chosen by the OS (or in ``$BANLIEUE_PORT_RANGE``,
    :func:`port_range`) with every socket held bound until all are chosen. Use it wherever
    several ports are chosen together: back-to-back :func:`free_port` calls can return the same
    port (each socket is closed before the next is bound), and CAPI core once failed to start
    with its metrics listener on the port its health probe already had ("address already in
    use"). Raises OSError when ``host`` cannot be bound."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for s in socks:
            _bind_free(s, host)
        return [int(s.getsockname()[1]) for s in socks]


def find_kubectl() -> str:
    """kubectl on PATH, else the Google Cloud SDK's; StartupError when neither exists."""
    found = shutil.which("kubectl")
    if found:
        return found
    if KUBECTL_FALLBACK.is_file():
        return str(KUBECTL_FALLBACK)
    raise StartupError("kubectl not found on PATH nor at /usr/lib/google-cloud-sdk/bin/kubectl (run make deps)")


def find_vcsim() -> Path:
    """``$BANLIEUE_VCSIM`` or ``<repo>/bin/vcsim``; StartupError when missing."""
    path = Path(os.environ.get("BANLIEUE_VCSIM") or REPO_ROOT / "bin" / "vcsim")
    if not path.is_file():
        raise StartupError(f"{path} is missing: run `make vcsim`")
    return path


def config_dir(name: str) -> Path:
    """``config/<name>`` of the source tree (``make dev`` runs from a clone)."""
    for root in (REPO_ROOT, Path.cwd()):
        if (root / "config" / name).is_dir():
            return root / "config" / name
    raise StartupError(f"config/{name} not found (run banlieue dev from a clone of the repository)")


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` (127.0.0.1 only, no proxy); returns (status, body); status 0 = no answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()
    except (OSError, ValueError):
        return 0, b""


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for the (plain HTTP, no auth) API double at ``server``, context ``banlieue-dev``."""
    name = "banlieue-dev"
    cfg = {
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
    }
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def sample_documents(directory: Path) -> list[dict[str, Any]]:
    """Every YAML document of ``directory/*.yaml`` (not sub-directories: ``capi/`` needs CAPI)."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict))
    return docs


def is_provider(doc: dict[str, Any]) -> bool:
    """True for a ``banlieue.io`` Provider document."""
    return is_banlieue(doc, "Provider")


APPLY_ORDER = ("Namespace", "Secret", "ConfigMap", "Provider", "VMClass", "VMImage")
"""Kinds applied first, in this order (what the others refer to); VirtualMachines last."""
WAITED = {"Provider": ("providers", True), "VMImage": ("vmimages", False)}
"""The kinds stage 5 waits for (Ready) before it applies the VirtualMachines: (plural, namespaced)."""


def is_banlieue(doc: dict[str, Any], kind: str) -> bool:
    """True for a ``banlieue.io`` document of ``kind``."""
    return doc.get("kind") == kind and str(doc.get("apiVersion", "")).startswith("banlieue.io/")


def apply_rank(doc: dict[str, Any]) -> int:
    """Sort key of a sample document: :data:`APPLY_ORDER`, then the rest, VirtualMachines last."""
    kind = str(doc.get("kind", ""))
    if kind in APPLY_ORDER:
        return APPLY_ORDER.index(kind)
    return len(APPLY_ORDER) + (1 if is_banlieue(doc, "VirtualMachine") else 0)


def point_providers_at(docs: list[dict[str, Any]], endpoints: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """Copies of ``docs`` whose Providers use ``endpoints[name] = (sdk_url, ca_pem)``: the endpoint
    replaced and TLS verified against the simulator's CA (``caBundle.inline``) instead of skipped."""
    out: list[dict[str, Any]] = []
    for doc in docs:
        doc = json.loads(json.dumps(doc))
        name = str((doc.get("metadata") or {}).get("name", ""))
        if is_provider(doc) and name in endpoints:
            url, ca_pem = endpoints[name]
            connection = doc.setdefault("spec", {}).setdefault("connection", {})
            connection["endpoint"] = url
            connection.pop("insecureSkipTLSVerify", None)
            connection["caBundle"] = {"inline": ca_pem}
        out.append(doc)
    return out


# --- the environment --------------------------------------------------------------------------


@dataclass
class DevEnv:
    """The running pieces; filled stage by stage."""

    args: DevOptions
    progress: Progress
    children: Children = field(default_factory=Children)
    kubectl: str = ""
    api_url: str = ""
    kubeconfig: Path = Path()
    vcsims: dict[str, dict[str, Any]] = field(default_factory=dict)
    vcsim_children: dict[str, Child] = field(default_factory=dict)
    metrics_url: str = ""
    probes_url: str = ""
    vm_names: list[str] = field(default_factory=list)
    restored: bool = False
    clusterctl_repo: Path | None = None  # --capi: the clusterctl local repository (its clusterctl.yaml inside)
    clusterctl_version: str = ""

    @property
    def state(self) -> Path:
        """The state directory as an absolute path: children run in other working directories."""
        return self.args.state_dir.absolute()

    def run_kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
        """``kubectl --kubeconfig <state>/kubeconfig ARGS``; StartupError with stderr on failure."""
        argv = [self.kubectl, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.state / "kube-cache"), *args]
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise StartupError(f"kubectl {' '.join(args[:2])} did not finish within {timeout:g} s") from None
        if proc.returncode != 0:
            raise StartupError(f"kubectl {' '.join(args[:2])} failed: {' '.join(proc.stderr.split())[:500]}")
        return proc.stdout

    @property
    def real(self) -> bool:
        """``--apiserver real``: kube-apiserver from ``make envtest`` instead of the double."""
        return self.args.apiserver == "real"

    def start_envtest(self) -> None:
        from banlieue.testing.envtest import envtest_binaries_missing

        missing = envtest_binaries_missing()
        if missing:
            raise StartupError(missing)
        argv = [sys.executable, "-m", "banlieue.testing.envtest", "up", "--dir", str(self.state / "envtest"),
                "--port", str(self.args.api_port)]
        child = self.children.start("envtest", argv, self.state / "envtest.log", stdout_pipe=True)
        line = child.first_line(STARTUP_TIMEOUT + 30)
        if line is None:
            raise StartupError(f"envtest not ready within {STARTUP_TIMEOUT + 30:g} s (log {child.log})")
        match = re.fullmatch(r"envtest ready in \S+ s: (https://127\.0\.0\.1:\d+) kubeconfig=(\S+)", line)
        if match is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=5)
            raise StartupError(f"envtest failed: {child.tail(1) or line!r} (log {child.log})")
        self.api_url, self.kubeconfig = match.group(1), Path(match.group(2))

    @property
    def state_file(self) -> Path:
        """Where the API-server double keeps its objects (``--state-file``): written by every run,
        read back only with ``--keep-state``."""
        return self.state / API_STATE_FILE

    def start_apiserver(self) -> None:
        """Start the API server. The double always saves its objects to :attr:`state_file`; a run
        without ``--keep-state`` removes the previous run's file first (a fresh API), a run with
        it starts from that file (``restored`` says whether there was one)."""
        if self.real:
            if self.args.keep_state:
                raise StartupError("--keep-state keeps the API-server double's objects; with --apiserver real "
                                   "the API starts empty every run (envtest's etcd is temporary)")
            self.start_envtest()
            return
        if self.args.keep_state:
            self.restored = self.state_file.is_file()
        else:
            self.state_file.unlink(missing_ok=True)
        child = self.children.start(
            "API server double",
            [sys.executable, "-m", "banlieue.testing.apiserver", "--host", "127.0.0.1", "--port", str(self.args.api_port),
             "--state-file", str(self.state_file)],
            self.state / "apiserver.log", stdout_pipe=True,
        )
        line = child.first_line(STARTUP_TIMEOUT)
        if line is None:
            raise StartupError(f"no URL within {STARTUP_TIMEOUT:g} s (log {child.log}): {child.tail(5)}")
        if not line.startswith("http://"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=5)  # EOF: it is exiting; report its code and log
            self.children.check()
            raise StartupError(f"unexpected first line {line!r} (log {child.log})")
        self.api_url = line

    def vcsim_argv(self, binary: Path, workdir: Path, port: int, index: int, instance_uuid: str | None = None) -> list[str]:
        """The simulator command line of the ``index``-th Provider (``port`` 0: a free one;
        ``instance_uuid``: the vCenter identity a restart keeps, else the simulator draws one)."""
        identity = [f"--instance-uuid={instance_uuid}"] if instance_uuid else []
        return [str(binary), f"--listen=127.0.0.1:{port}", f"--info-file={workdir / 'info.json'}", *VCSIM_FLAGS,
                "--tls=true", f"--tls-dir={workdir / 'tls'}", f"--guest-ip={GUEST_IP_RANGES[index % len(GUEST_IP_RANGES)]}",
                *identity, *self.args.vcsim_args]

    def kept_vcenter_identities(self) -> dict[str, str]:
        """``{Provider name: status.vcenter.instanceUUID}`` of the Providers in the kept state
        file (empty without ``--keep-state`` or a file). A kept Provider refuses a vCenter of
        another instance UUID while machines use it (ADR 0013), so the new simulators take the
        kept ones: the same vCenters, their VMs gone. An unreadable file gives {} (the double
        itself then reports it)."""
        if not self.restored:
            return {}
        try:
            doc = json.loads(self.state_file.read_text(encoding="utf-8"))
            out: dict[str, str] = {}
            for entry in doc.get("objects") or []:
                obj = entry.get("object") or {}
                uuid = ((obj.get("status") or {}).get("vcenter") or {}).get("instanceUUID")
                if obj.get("kind") == "Provider" and uuid:
                    out[str(obj["metadata"]["name"])] = str(uuid)
            return out
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            return {}

    def start_vcsims(self, providers: list[str]) -> None:
        binary = find_vcsim()
        kept = self.kept_vcenter_identities()
        pending: dict[str, tuple[Child, Path]] = {}
        for index, provider in enumerate(providers):
            workdir = self.state / f"vcsim-{provider}"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            port = self.args.vcsim_port + index if self.args.vcsim_port else 0
            argv = self.vcsim_argv(binary, workdir, port, index, kept.get(provider))
            child = self.children.start(f"vcsim {provider}", argv, workdir / "vcsim.log", cwd=workdir, restartable=True)
            pending[provider] = (child, workdir / "info.json")
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while pending:
            for provider, (child, info) in list(pending.items()):
                with contextlib.suppress(OSError, ValueError):
                    self.vcsims[provider] = json.loads(info.read_text(encoding="utf-8"))
                    del pending[provider]
                    # A restart listens on the same port (the Provider's endpoint stays right) and
                    # is the same vCenter (instance UUID): its Provider keeps serving its machines.
                    index = providers.index(provider)
                    child.argv = self.vcsim_argv(binary, info.parent, int(self.vcsims[provider]["port"]), index,
                                                 self.vcsims[provider].get("instance_uuid"))
                    self.vcsim_children[provider] = child
                    continue
                if child.process.poll() is not None or time.monotonic() > deadline:
                    raise StartupError(f"{child.name} did not start (log {child.log}): {child.tail(5)}")
            time.sleep(0.05)

    # --- supervision (once ready) -----------------------------------------------------------

    def supervise(self) -> None:
        """Restart every child that has died: the manager (its log kept as ``manager.log.1``)
        and the simulators (same port, same inventory, a fresh CA written to the Provider).

        Raises StartupError when the API server double (or envtest) died (it is not restarted;
        the double's objects up to ``--save-interval`` before are in ``apiserver-state.json``,
        which ``--keep-state`` starts from) or a child crash-loops (:meth:`Children.restart`).
        """
        for child in self.children.exited():
            code = child.process.returncode
            uptime = time.monotonic() - child.started
            if not child.restartable:
                kept = (f"; its objects are in {self.state_file}: `make dev KEEP_STATE=1` starts from them"
                        if not self.real else "; its objects were in a temporary etcd")
                raise StartupError(f"{child.name} {describe_exit(code)} (log {child.log}): {child.tail(5)}{kept}; "
                                   "dev stops")
            provider = next((p for p, c in self.vcsim_children.items() if c is child), None)
            if provider is None:
                self._restart_manager(child, f"{child.name} {describe_exit(code)} after {uptime:.0f} s")
            else:
                self._restart_vcsim(provider, child, f"{child.name} {describe_exit(code)} after {uptime:.0f} s")

    def _say(self, text: str) -> None:
        self.progress.out.write(text + "\n")
        self.progress.out.flush()

    def _restart_manager(self, child: Child, what: str) -> None:
        kept = self.children.restart(child)
        self._say(f"{what}; restarting it" + (f" (its log so far: {kept})" if kept else ""))
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT
        while http_get(self.probes_url + "/readyz", timeout=2.0)[0] != 200:
            if child.process.poll() is not None:
                return  # the next supervise() call restarts it again (or gives up)
            if time.monotonic() > deadline:
                raise StartupError(f"restarted {child.name}: /readyz not ready within {STARTUP_TIMEOUT:g} s (log {child.log})")
            time.sleep(0.2)
        self._say(f"{child.name} is ready again ({time.monotonic() - started:.1f} s); it takes over its Leases "
                  "once the dead process's expire (about 15 s)")

    def _restart_vcsim(self, provider: str, child: Child, what: str) -> None:
        old = self.vcsims[provider]
        old_ca = Path(old["ca_file"]).read_text(encoding="utf-8")  # the restart overwrites the file
        info = self.state / f"vcsim-{provider}" / "info.json"
        info.unlink(missing_ok=True)
        kept = self.children.restart(child)
        self._say(f"{what}; restarting it on {old['url']} with the same inventory"
                  + (f" (its log so far: {kept})" if kept else "")
                  + ". VMs cloned into it are gone: banlieue reports them VMNotFound (see docs/dev.md)")
        started = time.monotonic()
        deadline = started + STARTUP_TIMEOUT
        while not info.is_file():
            if child.process.poll() is not None:
                return
            if time.monotonic() > deadline:
                raise StartupError(f"restarted {child.name} did not start within {STARTUP_TIMEOUT:g} s (log {child.log})")
            time.sleep(0.05)
        new = json.loads(info.read_text(encoding="utf-8"))
        self.vcsims[provider] = new
        note = ""
        ca_pem = Path(new["ca_file"]).read_text(encoding="utf-8")
        if ca_pem != old_ca:
            # The simulator made a new CA: trust it as the Provider's caBundle, as an operator
            # would after a vCenter's certificate changes.
            patch = {"spec": {"connection": {"caBundle": {"inline": ca_pem}}}}
            self.run_kubectl("patch", "provider.banlieue.io", provider, "--type=merge", "-p", json.dumps(patch))
            note = f"; its new CA is now Provider {provider}'s caBundle"
        self._say(f"{child.name} is serving again on {new['url']} ({time.monotonic() - started:.1f} s){note}")

    def install_crds(self) -> int:
        if self.args.capi:
            # As the CAPI tier does: CAPI follows references only to CRDs with its contract label,
            # which config/default's kustomization adds (config/crd alone lacks it).
            from banlieue.testing.capi import install_banlieue

            try:
                install_banlieue(self.kubeconfig)
            except RuntimeError as err:
                raise StartupError(str(err)) from None
            return len(list(config_dir("crd").glob("*.yaml")))
        if not self.real:
            self.kubeconfig = write_kubeconfig(self.state / "kubeconfig", self.api_url)
        files = sorted(p for p in config_dir("crd").glob("*.yaml") if p.name.lower() != "kustomization.yaml")
        crds = [p for p in files if (yaml.safe_load(p.read_text(encoding="utf-8")) or {}).get("kind") == "CustomResourceDefinition"]
        if not crds:
            raise StartupError(f"no CustomResourceDefinition in {config_dir('crd')}")
        if self.real:
            # As an operator would: server-side apply, then wait until the API serves them.
            self.run_kubectl("apply", "--server-side", *(a for p in crds for a in ("-f", str(p))))
            self.run_kubectl("wait", "--for=condition=Established", "--timeout=60s",
                             *(a for p in crds for a in ("-f", str(p))), timeout=90)
        else:
            self.run_kubectl("apply", "--validate=false", *(a for p in crds for a in ("-f", str(p))))
        return len(crds)

    def start_capi(self) -> None:
        """``--capi``: the three CAPI managers (``python -m banlieue.testing.capi up``, which prints
        one line once all answer ``/readyz``), then the clusterctl local repository."""
        from banlieue.testing.capi import READY_TIMEOUT as CAPI_READY_TIMEOUT
        from banlieue.testing.clusterctl import ClusterctlError, write_repository

        workdir = self.state / "capi"
        shutil.rmtree(workdir, ignore_errors=True)
        argv = [sys.executable, "-m", "banlieue.testing.capi", "up", "--kubeconfig", str(self.kubeconfig), "--dir", str(workdir)]
        child = self.children.start("Cluster API managers", argv, self.state / "capi.log", stdout_pipe=True)
        timeout = CAPI_READY_TIMEOUT + STARTUP_TIMEOUT  # rendering (go list, kubectl kustomize) and applying come first
        line = child.first_line(timeout)
        if line is None:
            raise StartupError(f"not ready within {timeout:g} s (log {child.log})")
        if not line.startswith("capi: core, kubeadm bootstrap and control plane managers ready"):
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=STOP_TIMEOUT)
            raise StartupError(f"{child.tail(1) or line!r} (log {child.log})")
        try:
            repo = write_repository(self.state / "clusterctl")
        except (ClusterctlError, subprocess.TimeoutExpired) as err:
            raise StartupError(f"clusterctl repository: {err}") from None
        self.clusterctl_repo, self.clusterctl_version = repo.root, repo.version

    def start_manager(self) -> None:
        options = self.args.options
        listeners = {}
        for name, address in (("metrics", options.metrics_bind_address), ("probes", options.health_probe_bind_address)):
            host, port = split_bind_address(address) or ("127.0.0.1", 0)
            host = host if host in ("127.0.0.1", "localhost") else "127.0.0.1"  # dev: loopback only
            listeners[name] = (host, free_port(host, port))
        if listeners["metrics"] == listeners["probes"]:
            listeners["probes"] = ("127.0.0.1", free_port())
        self.metrics_url = "http://{}:{}/metrics".format(*listeners["metrics"])
        self.probes_url = "http://{}:{}".format(*listeners["probes"])
        argv = [
            sys.executable, "-m", "banlieue.cli", "manager", "--kubeconfig", str(self.kubeconfig),
            "--leader-elect", "--leader-election-namespace", "default",
            "--metrics-bind-address", "{}:{}".format(*listeners["metrics"]),
            "--health-probe-bind-address", "{}:{}".format(*listeners["probes"]),
            "--max-concurrent-reconciles", str(options.max_concurrent_reconciles),
            "--log-format", options.log_format, "--log-level", options.log_level,
            "--vsphere-task-timeout", f"{options.vsphere_task_timeout:g}",
        ]
        if options.watch_filter:
            argv += ["--watch-filter", options.watch_filter]
        child = self.children.start("banlieue manager", argv, self.state / "manager.log", restartable=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while http_get(self.probes_url + "/readyz", timeout=2.0)[0] != 200:
            self.children.check()
            if time.monotonic() > deadline:
                raise StartupError(f"/readyz not ready within {STARTUP_TIMEOUT:g} s (log {child.log})")
            time.sleep(0.2)

    def reclone_kept_vms(self) -> int:
        """With kept API state the simulators still start empty, so every VSphereMachine a
        VirtualMachine owns names a VM that no longer exists (banlieue would report
        ``VMNotFound`` and never clone it again on its own). dev deletes those VSphereMachines
        (label ``banlieue.io/owned-by``) before the manager starts, after dropping the provider's
        finalizer (there is no VM to destroy); each VirtualMachine then creates a new one, whose VM
        is cloned from the image. Returns how many were deleted. VSphereMachines of CAPI Machines
        are left alone (they report ``VMNotFound``: delete their Machines).

        The kept Providers name the previous run's simulators (other ports, other CAs), so the
        samples other than VirtualMachines are applied first: the manager then starts with every
        Provider pointing at a running simulator, and the deletions need no reconnect."""
        validate = () if self.real else ("--validate=false",)
        first = self._samples()[1]
        self.run_kubectl("apply", *validate, "-f", "-", stdin=yaml.safe_dump_all(first, sort_keys=False))
        listed = self.run_kubectl("get", "vspheremachines", "-A", "-l", LABEL_OWNED_BY, "-o",
                                  "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name}{\"\\n\"}{end}")
        machines = [line.split() for line in listed.splitlines() if line.strip()]
        for namespace, name in machines:
            # Their VMs are certainly gone (the simulators were started empty by this process),
            # so dev drops the provider's finalizer itself: the machines are gone before the
            # manager starts, and no reconcile of the old object (from a cache that has not seen
            # the deletion yet) can write its status to the new machine of the same name.
            self.run_kubectl("patch", "vspheremachine", "-n", namespace, name, "--type=merge",
                             "-p", '{"metadata":{"finalizers":null}}')
        if machines:
            self.run_kubectl("delete", "vspheremachines", "-A", "-l", LABEL_OWNED_BY, "--wait=true", timeout=120)
        return len(machines)

    def apply_samples(self) -> int:
        """Apply the samples in two steps so that start-up shows no transient failure: first
        everything but the VirtualMachines (Secrets, Providers, classes, images, in dependency
        order: :data:`APPLY_ORDER`), then, once every Provider and VMImage is Ready, the
        VirtualMachines (applied together, a VM could be scheduled before its class exists or
        its image is resolved: ``VMClass "small" not found``, phase ``Failed`` for a moment)."""
        docs, first, vms = self._samples()
        self.vm_names = sorted(str(d["metadata"]["name"]) for d in vms)
        validate = () if self.real else ("--validate=false",)  # the double serves no OpenAPI v3 for kubectl
        self.run_kubectl("apply", *validate, "-f", "-", stdin=yaml.safe_dump_all(first, sort_keys=False))
        waited = [self._path(d) for d in first if any(is_banlieue(d, kind) for kind in WAITED)]
        deadline = time.monotonic() + READY_TIMEOUT
        while not_ready := ["/".join(path.rsplit("/", 2)[1:]) for path in waited if not self._ready(path)]:
            self.children.check()
            if time.monotonic() > deadline:
                raise StartupError(f"not Ready within {READY_TIMEOUT:g} s: {', '.join(not_ready)} "
                                   f"(log {self.state / 'manager.log'})")
            time.sleep(0.2)
        if vms:
            self.run_kubectl("apply", *validate, "-f", "-", stdin=yaml.safe_dump_all(vms, sort_keys=False))
        return len(docs)

    def _samples(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        """(every sample document in apply order, those that are not VirtualMachines, the
        VirtualMachines), each Provider pointed at its simulator's URL and CA."""
        docs = sample_documents(config_dir("samples"))
        endpoints = {name: (vc["url"], Path(vc["ca_file"]).read_text(encoding="utf-8")) for name, vc in self.vcsims.items()}
        docs = sorted(point_providers_at(docs, endpoints), key=apply_rank)
        vms = [d for d in docs if is_banlieue(d, "VirtualMachine")]
        return docs, [d for d in docs if not is_banlieue(d, "VirtualMachine")], vms

    @staticmethod
    def _path(doc: dict[str, Any]) -> str:
        plural, namespaced = WAITED[str(doc["kind"])]
        scope = f"namespaces/{doc['metadata'].get('namespace') or 'default'}/" if namespaced else ""
        return f"/apis/banlieue.io/v1alpha1/{scope}{plural}/{doc['metadata']['name']}"

    def _ready(self, path: str) -> bool:
        """True when the object at ``path`` has condition Ready True (False while it cannot be read)."""
        if self.real:  # TLS and a client certificate: kubectl has them from the kubeconfig
            try:
                text = self.run_kubectl("get", "--raw", path)
            except StartupError:
                return False
            return _ready_reason(json.loads(text)).startswith("Ready=True")
        status, body = http_get(self.api_url + path)
        return status == 200 and _ready_reason(json.loads(body)).startswith("Ready=True")

    def virtual_machines(self) -> dict[str, dict[str, Any]]:
        if self.real:  # TLS and a client certificate: kubectl has them from the kubeconfig
            items = json.loads(self.run_kubectl("get", "virtualmachines.banlieue.io", "-A", "-o", "json")).get("items") or []
            return {str(vm["metadata"]["name"]): vm for vm in items if vm["metadata"].get("namespace") == "default"}
        status, body = http_get(self.api_url + VM_PATH)
        if status != 200:
            raise StartupError(f"listing VirtualMachines answered {status or 'nothing'} (log {self.state / 'apiserver.log'})")
        items = json.loads(body).get("items") or []
        return {str(vm["metadata"]["name"]): vm for vm in items if vm["metadata"].get("namespace") == "default"}

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last, last_print = "", 0.0
        while True:
            self.children.check()
            vms = self.virtual_machines()
            phases = {name: phase_of(vms[name]) if name in vms else "Missing" for name in self.vm_names}
            ready = sum(1 for p in phases.values() if p == READY)
            waiting = ", ".join(f"{n} {p}" for n, p in phases.items() if p != READY)
            line = f"{ready}/{len(phases)} Ready" + (f" (waiting: {waiting})" if waiting else "")
            if line != last or time.monotonic() - last_print > 15:
                self.progress.detail(f"{line} [{timeout - (deadline - time.monotonic()):.0f} s]")
                last, last_print = line, time.monotonic()
            if ready == len(phases):
                return
            if time.monotonic() > deadline:
                reasons = "; ".join(f"{n}: {_ready_reason(vms.get(n))}" for n, p in phases.items() if p != READY)
                raise StartupError(f"not Ready within {timeout:g} s: {reasons} (log {self.state / 'manager.log'})")
            time.sleep(0.5)


def _ready_reason(vm: dict[str, Any] | None) -> str:
    if vm is None:
        return "not created"
    for condition in (vm.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return f"Ready={condition.get('status')} {condition.get('reason', '')}: {condition.get('message', '')}"[:300]
    return "no Ready condition yet"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(args: DevOptions, out: IO[str] | None = None) -> int:
    """Run the dev environment until interrupted (or, with ``exit_when_ready``, until ready).

    Returns 0 (ready and exited, or stopped by Ctrl-C/SIGTERM once ready), 130 when interrupted
    before ready. Raises StartupError naming the failed stage, its reason and log file.
    """
    out = out or sys.stdout
    started = time.monotonic()
    try:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        lock = (args.state_dir / "dev.lock").open("a+")
    except OSError as err:
        raise StartupError(f"cannot create --state-dir {args.state_dir}: {err.strerror or err}") from None
    with lock:
        try:
            # One environment per state directory: a second one would overwrite its kubeconfig.
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StartupError(f"another banlieue dev is running with --state-dir {args.state_dir}") from None
        remove_stale_pid_files(args.state_dir)
        return _run(args, out, started)


def remove_stale_pid_files(state_dir: Path) -> list[Path]:
    """Remove every ``*.pid`` under ``state_dir`` and return them. Called with ``dev.lock`` held:
    no other dev runs with this state directory, so they are a killed dev's (SIGKILL leaves them;
    its children died with it, ``PR_SET_PDEATHSIG``), and their numbers may by now be other
    processes' (a ``kill $(cat manager.pid)`` would signal a stranger)."""
    stale = sorted(state_dir.rglob("*.pid"))
    for path in stale:
        path.unlink(missing_ok=True)
    return stale


def _run(args: DevOptions, out: IO[str], started: float) -> int:
    if args.capi:
        from banlieue.testing.capi import binaries_missing

        if missing := binaries_missing():  # before anything starts: one line, nothing to stop
            raise StartupError(missing)
    env = DevEnv(args, Progress(out, STAGES + (1 if args.capi else 0)))
    # Children's temporary files (the simulators' datastore directories; a killed simulator
    # cannot remove its own) go to <state>/tmp, removed when dev stops: nothing is left in /tmp.
    tmp = env.state / "tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env.children.env = {**os.environ, "TMPDIR": str(tmp)}
    previous = signal.signal(signal.SIGTERM, _interrupt)
    # Ctrl-C stops dev even when it was started with SIGINT ignored (a background job of a
    # non-interactive shell inherits SIG_IGN); Python only installs its handler when it is not.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    ready = stopping = False
    try:
        env.kubectl = find_kubectl()
        providers = [str(d["metadata"]["name"]) for d in sample_documents(config_dir("samples")) if is_provider(d)]
        with env.progress.stage("starting kube-apiserver (envtest)" if env.real else "starting API server double") as notes:
            env.start_apiserver()
            notes.append(env.api_url)
        with env.progress.stage(f"starting vcsim for {', '.join(providers) or 'no Provider'}") as notes:
            env.start_vcsims(providers)
            notes.extend(f"{name} {vc['url']}" for name, vc in env.vcsims.items())
            notes.append("guest IPs simulated")
        title = "installing banlieue (config/default: CRDs, RBAC, admission policies)" if args.capi else "installing CRDs (config/crd)"
        with env.progress.stage(title) as notes:
            notes.append(f"{env.install_crds()} CRDs")
            if env.restored:
                notes.append(f"kept API state from {env.state_file}; the simulators start empty: "
                             f"{env.reclone_kept_vms()} VMs will be cloned again")
        if args.capi:
            with env.progress.stage("starting Cluster API (core, kubeadm bootstrap and control plane managers)") as notes:
                env.start_capi()
                notes.append(f"logs in {env.state / 'capi'}")
                notes.append(f"clusterctl repository {env.clusterctl_repo}")
        with env.progress.stage("starting banlieue manager") as notes:
            env.start_manager()
            notes.append(f"log {env.state / 'manager.log'}")
        with env.progress.stage("applying samples (config/samples, Providers pointed at vcsim)") as notes:
            notes.append(f"{env.apply_samples()} objects")
        with env.progress.stage(f"waiting for {len(env.vm_names)} VirtualMachines to be Ready"):
            env.wait_ready()
        with env.progress.stage("kubectl get bvm,vsm,bprov"):
            table = env.run_kubectl("get", "bvm,vsm,bprov")
        ready = True
        out.write(table)
        if args.exit_when_ready:
            # Nothing keeps running after this: no kubeconfig/metrics hints; the closing line is
            # written by ``finally`` once every child has stopped.
            return 0
        _print_usage(env, out, time.monotonic() - started)
        while True:
            env.supervise()
            time.sleep(1.0)
    except KeyboardInterrupt:
        out.write("\nstopping ...\n")
        out.flush()
        stopping = True
        return 0 if ready else 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not abandon the children
        try:
            env.children.stop_all()
            shutil.rmtree(tmp, ignore_errors=True)
            if stopping:
                out.write("stopped: every child process has exited\n")
            elif ready and args.exit_when_ready:
                out.write(f"banlieue dev: all {len(env.vm_names)} VirtualMachines were Ready after "
                          f"{time.monotonic() - started:.1f} s; everything has been stopped (--exit-when-ready)\n")
        finally:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous)
        out.flush()


def _print_usage(env: DevEnv, out: IO[str], elapsed: float) -> None:
    given = env.args.state_dir
    shown = given if given.is_absolute() else Path("$PWD") / given
    state = env.state  # the kubeconfig is in it: <state>/kubeconfig, or envtest/kubeconfig with --apiserver real
    out.write(
        f"\nbanlieue dev is ready ({elapsed:.1f} s). In another terminal:\n"
        f"  export KUBECONFIG={shown / env.kubeconfig.absolute().relative_to(state)}\n"
        f"  kubectl get bvm,vsm,bprov,bvmc,bvmi,vsc\n"
        f"Manager log: {state / 'manager.log'}   metrics: {env.metrics_url}   probes: {env.probes_url}/readyz\n"
    )
    if env.clusterctl_repo is not None:
        out.write("Cluster API (logs in {}): a Cluster from the clusterctl repository {}:\n{}".format(
            state / "capi", env.clusterctl_repo, "".join(f"  {line}\n" for line in capi_usage(env))))
    out.write("Ctrl-C stops everything.\n")
    out.flush()


CAPI_EXAMPLE_ENDPOINT = "127.17.0.1"
"""The example's control-plane endpoint: CAPI's cluster cache dials it, so it is on loopback
(nobody serves it: the Machines are provisioned, their nodes never join)."""


def capi_usage(env: DevEnv) -> list[str]:
    """The shell lines that create a Cluster ``capi-demo`` (``demo`` is the samples' VSphereCluster) of the ``bootstrap-secret`` flavour from the dev
    environment's clusterctl repository (with ``KUBECONFIG`` exported), then describe it. Machine
    sizes fit the simulated hosts (4 GiB each)."""
    assert env.clusterctl_repo is not None
    from banlieue.testing.capi import binary

    clusterctl, config = binary("clusterctl"), env.clusterctl_repo / "clusterctl.yaml"
    return [
        "kubectl create secret generic capi-demo-bootstrap --type cluster.x-k8s.io/secret "
        "--from-literal=format=cloud-config --from-literal=value='#cloud-config'",
        f"CONTROL_PLANE_ENDPOINT_IP={CAPI_EXAMPLE_ENDPOINT} BOOTSTRAP_DATA_SECRET_NAME=capi-demo-bootstrap "
        "BANLIEUE_WORKER_CPUS=1 BANLIEUE_WORKER_MEMORY_MIB=1024 BANLIEUE_WORKER_DISK_GIB=10 "
        f"{clusterctl} generate cluster capi-demo --config {config} --infrastructure banlieue:{env.clusterctl_version} "
        "--flavor bootstrap-secret --kubernetes-version v1.34.4 --worker-machine-count 2 | kubectl apply -f -",
        f"{clusterctl} describe cluster capi-demo --config {config} --show-conditions all",
    ]
