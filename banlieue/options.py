"""Process options of every ``banlieue`` role: the flags of SPEC §5 and their environment fallbacks.

Each flag ``--some-flag`` has the environment fallback ``BANLIEUE_SOME_FLAG``. Precedence: the
flag wins over the environment, the environment wins over the default (the order
controller-runtime users know from ``--kubeconfig`` and ``KUBECONFIG``). An empty environment
variable counts as unset. Values are validated here, once; a bad value raises
:class:`UsageError`, which ``banlieue.cli.main`` prints as one line and exits with 2.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

LogFormat = Literal["json", "console"]
LogLevel = Literal["debug", "info", "warning", "error"]
Role = Literal["controller", "provider-vsphere", "manager"]

ROLES: tuple[Role, ...] = ("controller", "provider-vsphere", "manager")

# Kubernetes puts the pod's namespace here for every pod with a service account token
# (client-go rest.InClusterConfig reads the same directory).
SERVICE_ACCOUNT_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class UsageError(Exception):
    """A flag or environment value is invalid; the process exits with code 2 (argparse's code).

    The message is one line naming the flag or variable and the offending value, e.g.
    ``--max-concurrent-reconciles must be >= 1 (got 0)``.
    """


class StartupError(Exception):
    """The process cannot start: e.g. the API server is unreachable or the kubeconfig unusable.

    Raised by the role runners (``banlieue.cmd.roles.run_role``) and ``banlieue dev``;
    ``banlieue.cli.main`` prints ``banlieue: error: <message>`` as one line and exits with 1.
    The message must not contain credentials.
    """


@dataclass(frozen=True)
class Options:
    """Validated options shared by the ``controller``, ``provider vsphere`` and ``manager`` roles.

    Attributes:
        kubeconfig: path (or ``os.pathsep``-separated list, as in ``KUBECONFIG``) of the
            kubeconfig to use; ``None`` means in-cluster configuration.
        namespace: the only namespace to watch; ``None`` watches all namespaces.
        watch_filter: when set, only objects labelled ``cluster.x-k8s.io/watch-filter=<value>``
            are reconciled (CAPI convention); ``None`` reconciles every object.
        metrics_bind_address: ``host:port`` of ``/metrics`` (default ``127.0.0.1:8080``: loopback
            only, docs/security.md; ``":8080"``: all interfaces, for Prometheus behind
            config/network-policy);
            ``"0"`` disables the endpoint (controller-runtime convention).
        metrics_secure: serve ``/metrics`` over HTTPS to requests whose bearer token passes a
            TokenReview and a SubjectAccessReview for ``get`` on ``/metrics``
            (banlieue.runtime.metrics_auth; controller-runtime's default since v0.16).
        metrics_cert_dir: directory holding ``tls.crt`` and ``tls.key`` for the secure metrics
            listener; ``None``: a self-signed certificate made at start (needs ``openssl``).
        health_probe_bind_address: ``host:port`` of ``/healthz`` and ``/readyz``; ``"0"`` disables.
        leader_elect: take a coordination.k8s.io/v1 Lease per role before reconciling.
        leader_election_namespace: namespace of the Leases.
        max_concurrent_reconciles: workers per controller (controller-runtime
            ``MaxConcurrentReconciles``), >= 1. Default 32: a worker is a coroutine, and the
            vspheremachine controller lets one vCenter hold half of them (16 clones at once per
            vCenter; ``vcenter_slots.cap_for_workers``, issue 22).
        log_format: ``json`` (one object per line) or ``console`` (human-readable).
        log_level: minimum level logged.
        vsphere_task_timeout: seconds to wait for one vSphere task (clone, power, destroy) before
            treating it as failed; > 0.
        secret_resync_period: seconds between re-reads (GET by name) of the Secrets and
            ConfigMaps Providers and VSphereMachines reference; a changed one is noticed within
            this period at the latest, credentials vCenter refuses at once
            (banlieue.reconcilers.referenced, banlieue.reconcilers.refused).
        development_allow_http_endpoints: accept ``http://`` Provider endpoints (credentials in
            clear text): development against a local simulator only.
        allowed_endpoint_cidrs: comma-separated CIDRs every address of a Provider endpoint must
            be in before a connection is attempted (banlieue.backends.vsphere.allowlist);
            ``None``: no allow-list.
    """

    kubeconfig: str | None = None
    namespace: str | None = None
    watch_filter: str | None = None
    metrics_bind_address: str = "127.0.0.1:8080"
    metrics_secure: bool = False
    metrics_cert_dir: str | None = None
    health_probe_bind_address: str = ":8081"
    leader_elect: bool = False
    leader_election_namespace: str = "default"
    max_concurrent_reconciles: int = 32
    log_format: LogFormat = "json"
    log_level: LogLevel = "info"
    vsphere_task_timeout: float = 600.0
    secret_resync_period: float = 300.0
    development_allow_http_endpoints: bool = False
    allowed_endpoint_cidrs: str | None = None

    @property
    def metrics_listen(self) -> tuple[str, int] | None:
        """``(host, port)`` for the metrics server, ``None`` when disabled; host ``""`` = all."""
        return split_bind_address(self.metrics_bind_address)

    @property
    def health_probe_listen(self) -> tuple[str, int] | None:
        """``(host, port)`` for the probe server, ``None`` when disabled; host ``""`` = all."""
        return split_bind_address(self.health_probe_bind_address)


@dataclass(frozen=True)
class DevOptions:
    """Options of ``banlieue dev`` (API-server double + vcsim + manager in one process tree).

    Attributes:
        exit_when_ready: exit 0 as soon as the sample objects are Ready (CI smoke test).
        state_dir: directory for the kubeconfig, logs and vcsim state of the dev environment.
        api_port: 127.0.0.1 port of the API server; 0 picks a free port.
        apiserver: ``double`` (the embedded API-server double) or ``real`` (kube-apiserver,
            etcd and kube-controller-manager from ``make envtest``: banlieue.testing.envtest).
        vcsim_port: 127.0.0.1 port of vcsim; 0 picks a free port.
        options: options for the embedded manager (``kubeconfig`` is ``None``: dev writes its own).
        vcsim_args: flags passed to every simulator after dev's own (``--vcsim-arg``, repeatable;
            a later flag wins in Go's flag package, so these can override dev's defaults).
        keep_state: start from the API objects the previous run saved in the state directory
            (``apiserver-state.json``; the API-server double only) instead of an empty API.
        capi: ``--capi``: also the real Cluster API managers of ``make capi`` (banlieue.testing.capi)
            and a clusterctl local repository of the release; implies ``apiserver == "real"``.
    """

    exit_when_ready: bool
    state_dir: Path
    api_port: int
    vcsim_port: int
    options: Options
    vcsim_args: tuple[str, ...] = ()
    apiserver: str = "double"
    keep_state: bool = False
    capi: bool = False


# --- value parsers: str -> value, raising ValueError("must be ...") -------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?$")
_TRUE = {"true", "1", "t", "yes"}
_FALSE = {"false", "0", "f", "no"}


def split_bind_address(value: str) -> tuple[str, int] | None:
    """Split a controller-runtime bind address into ``(host, port)``.

    ``":8080"`` -> ``("", 8080)`` (all interfaces), ``"127.0.0.1:0"`` -> ``("127.0.0.1", 0)``
    (port 0: the OS picks a free port), ``"[::1]:8080"`` -> ``("::1", 8080)``, ``"0"`` -> ``None``
    (disabled). Raises ValueError for anything else.
    """
    if value == "0":
        return None
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError("must be host:port, :port, or 0 to disable")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise ValueError("must be host:port, :port, or 0 to disable")
    elif host and not _HOSTNAME.match(host):
        raise ValueError("must be host:port, :port, or 0 to disable")
    return host, int(port_text)


def parse_bind_address(value: str) -> str:
    """Validate a bind address (see :func:`split_bind_address`) and return it unchanged."""
    split_bind_address(value)
    return value


def parse_bool(value: str) -> bool:
    """Parse ``true``/``false`` (also ``1``/``0``, ``t``/``f``, ``yes``/``no``; any case)."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError("must be true or false")


def parse_positive_int(value: str) -> int:
    """Parse an integer >= 1 written in ASCII digits (``int()`` alone also takes ``" 4"``,
    ``1_000``, ``+5`` and other scripts' digits). Raises ValueError."""
    if re.fullmatch(r"-?[0-9]+", value) is None:
        raise ValueError("must be an integer >= 1")
    number = int(value, 10)
    if number < 1:
        raise ValueError("must be >= 1")
    return number


MAX_WORKERS = 1024
"""Most ``--max-concurrent-reconciles``: each worker is a task per controller, and far more than
the API server or a vCenter serves at once is a typo, not a setting."""


def parse_workers(value: str) -> int:
    """``--max-concurrent-reconciles``: ``parse_positive_int``, at most ``MAX_WORKERS``. Raises ValueError."""
    number = parse_positive_int(value)
    if number > MAX_WORKERS:
        raise ValueError(f"must be <= {MAX_WORKERS}")
    return number


def parse_vcsim_arg(value: str) -> str:
    """One ``--vcsim-arg``: a flag of ``bin/vcsim`` (``-name`` or ``-name=value``, one or two dashes).

    Raises UsageError (``--vcsim-arg: ...``) for anything else: a bare word would end the
    simulator's flag parsing and be ignored silently.
    """
    if not re.fullmatch(r"--?[A-Za-z][-A-Za-z0-9_]*(=.*)?", value, re.DOTALL):
        raise UsageError(f"--vcsim-arg: {value!r} must be a simulator flag, e.g. -method-delay=CloneVM_Task=5000")
    return value


def parse_apiserver_kind(value: str) -> str:
    """``double`` or ``real`` (``banlieue dev --apiserver``)."""
    if value not in ("double", "real"):
        raise ValueError("must be double or real")
    return value


def parse_port(value: str) -> int:
    """Parse a TCP port 0..65535 (0 = pick a free port)."""
    if not value.isdigit() or int(value) > 65535:
        raise ValueError("must be a port number 0..65535 (0 = a free port)")
    return int(value)


def parse_seconds(value: str) -> float:
    """Parse a positive, finite number of seconds (``600``, ``2.5``)."""
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError("must be a number of seconds > 0") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a number of seconds > 0")
    return seconds


def parse_seconds_between(low: float, high: float) -> Callable[[str], float]:
    """A parser of a finite number of seconds in ``[low, high]`` (``parse_seconds`` with
    bounds): a period far below a second re-reads in a tight loop, one of 10**20 seconds never
    ends (a new-user review found both taken)."""
    def parse(value: str) -> float:
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds) or not low <= seconds <= high:
            raise ValueError(f"must be a number of seconds from {low:g} to {high:g}")
        return seconds

    parse.__name__ = f"seconds from {low:g} to {high:g}"
    return parse


def parse_namespace(value: str) -> str | None:
    """Parse a namespace name (RFC 1123 label, at most 63 characters); ``""`` means none."""
    if value == "":
        return None
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError("must be a namespace name (lower-case RFC 1123 label, at most 63 characters)")
    return value


def parse_label_value(value: str) -> str | None:
    """Parse a Kubernetes label value (at most 63 characters); ``""`` means no filter."""
    if value == "":
        return None
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError("must be a valid label value (at most 63 characters: letters, digits, '-', '_', '.')")
    return value


def choice(*allowed: str, aliases: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """Return a parser accepting one of ``allowed`` (case-insensitive) or an alias of one."""
    alias_map = dict(aliases or {})

    def parse(value: str) -> str:
        lowered = value.strip().lower()
        lowered = alias_map.get(lowered, lowered)
        if lowered not in allowed:
            raise ValueError("must be one of " + ", ".join(allowed))
        return lowered

    return parse


def parse_directory(value: str) -> str:
    """Parse a directory path (created later if missing); must not be empty."""
    if not value.strip():
        raise ValueError("must be a directory path")
    return value


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(value: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8, 192.168.1.5"`` -> networks (a bare address is a /32 or /128). Raises
    ValueError("must be ...") naming the bad entry."""
    out: list[Network] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError as err:
            raise ValueError(f"must be comma-separated CIDRs (e.g. 10.0.0.0/8,fd00::/8); {item!r} is not one") from err
    if not out:
        raise ValueError("must name at least one CIDR")
    return tuple(out)


def parse_cidr_list(value: str) -> str | None:
    """Comma-separated CIDRs (validated by ``parse_networks``, returned as given); ``""``: none."""
    if value.strip() == "":
        return None
    parse_networks(value)
    return value


def parse_optional_directory(value: str) -> str | None:
    """An existing directory path; ``""`` means none."""
    if value == "":
        return None
    if not Path(value).expanduser().is_dir():
        raise ValueError("must be an existing directory")
    return str(Path(value).expanduser())


def parse_kubeconfig(value: str) -> str | None:
    """Validate an explicit kubeconfig path: it must be an existing file; ``""`` means none."""
    if value == "":
        return None
    if not Path(value).expanduser().is_file():
        raise ValueError("must be an existing kubeconfig file")
    return str(Path(value).expanduser())


@dataclass(frozen=True)
class FlagSpec:
    """One command-line flag: its name, environment fallback, default and parser.

    ``default`` is the raw string form (``None``: no default, the resolver decides);
    ``parse`` turns a raw string into the value or raises ValueError("must be ...").
    ``boolean`` flags may be given bare (``--leader-elect``) or with a value (``=false``).
    """

    flag: str
    parse: Callable[[str], Any]
    default: str | None
    help: str
    boolean: bool = False
    metavar: str = "VALUE"

    @property
    def dest(self) -> str:
        """The argparse destination / dataclass field: ``--max-x`` -> ``max_x``."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def env(self) -> str:
        """The environment fallback: ``--max-x`` -> ``BANLIEUE_MAX_X``."""
        return "BANLIEUE_" + self.dest.upper()


def resolve(spec: FlagSpec, flag_value: str | None, env: Mapping[str, str]) -> Any:
    """Resolve one flag: flag wins over ``BANLIEUE_*`` env, env wins over the default.

    Raises UsageError naming the source (``--flag`` or ``BANLIEUE_FLAG``) and the bad value.
    Returns ``None`` when nothing is set and there is no default.
    """
    if flag_value is not None:
        source, raw = spec.flag, flag_value
    elif env.get(spec.env):
        source, raw = spec.env, env[spec.env]
    elif spec.default is not None:
        source, raw = spec.flag + " default", spec.default
    else:
        return None
    try:
        return spec.parse(raw)
    except ValueError as err:
        raise UsageError(f"{source} {err} (got {_show(raw)})") from None


def _show(raw: str) -> str:
    """The offending value as typed, quoted only when it is empty or has spaces."""
    return raw if raw and not any(c.isspace() for c in raw) else repr(raw)


def parse_kubeconfig_list(value: str) -> str:
    """Validate a ``KUBECONFIG`` value: an ``os.pathsep``-separated list of which at least one
    entry is an existing file. Returns the existing entries (``~`` expanded) joined by
    ``os.pathsep``; missing entries are dropped, as client-go's loading rules skip them (the
    kubeconfig library merges the rest). Raises ValueError("must ...") when none exists, the same
    check as ``--kubeconfig`` (``parse_kubeconfig``)."""
    entries = [str(Path(p).expanduser()) for p in value.split(os.pathsep) if p]
    existing = [p for p in entries if Path(p).is_file()]
    if not existing:
        raise ValueError("must be an existing kubeconfig file" if len(entries) <= 1 else "must name an existing kubeconfig file")
    return os.pathsep.join(existing)


def default_kubeconfig(env: Mapping[str, str], home: Path | None = None) -> str | None:
    """controller-runtime's fallback after the flag: ``KUBECONFIG``, in-cluster, ``~/.kube/config``.

    Returns ``None`` for in-cluster configuration (``KUBERNETES_SERVICE_HOST`` set), the
    ``KUBECONFIG`` value when set (checked like ``--kubeconfig``: ``parse_kubeconfig_list``),
    else ``~/.kube/config`` when it exists, else ``None`` (the role runner then fails with a
    StartupError: neither a kubeconfig nor in-cluster). Raises UsageError naming ``KUBECONFIG``
    and the value when it names no existing file.
    """
    if env.get("KUBECONFIG"):
        try:
            return parse_kubeconfig_list(env["KUBECONFIG"])
        except ValueError as err:
            raise UsageError(f"KUBECONFIG {err} (got {_show(env['KUBECONFIG'])})") from None
    if env.get("KUBERNETES_SERVICE_HOST"):
        return None
    home_config = (home or Path.home()) / ".kube" / "config"
    return str(home_config) if home_config.is_file() else None


def default_leader_election_namespace(sa_namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE_FILE) -> str:
    """The pod's own namespace when in-cluster (controller-runtime's default), else ``default``."""
    try:
        namespace = sa_namespace_file.read_text(encoding="utf-8").strip()
    except OSError:
        return "default"
    return namespace or "default"


def env_from_os() -> dict[str, str]:
    """A snapshot of the process environment (a seam so tests pass their own mapping)."""
    return dict(os.environ)
