"""Command-line grammar of ``banlieue`` and its translation into validated options.

Subcommands::

    banlieue controller         [role flags]   # VirtualMachine, VSphereCluster
    banlieue provider vsphere   [role flags] [--vsphere-task-timeout S]
    banlieue manager            [role flags] [--vsphere-task-timeout S]   # both roles
    banlieue crdgen --out DIR
    banlieue crddoc [--out FILE]
    banlieue dev [--exit-when-ready] [--state-dir DIR] [--api-port N] [--apiserver double|real] [--keep-state] [--capi] [--vcsim-port N] [--vcsim-arg=-FLAG=V]... ...
    banlieue dev vms [--state-dir DIR] [--vcenter NAME] [--output text|json]
    banlieue --version

Every flag value arrives as a string and is validated by :mod:`banlieue.options`, so a bad flag
and a bad ``BANLIEUE_*`` variable produce the same one-line message.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from banlieue import __version__
from banlieue.options import (
    DevOptions,
    FlagSpec,
    Options,
    Role,
    UsageError,
    choice,
    default_kubeconfig,
    default_leader_election_namespace,
    parse_apiserver_kind,
    parse_bind_address,
    parse_bool,
    parse_cidr_list,
    parse_directory,
    parse_kubeconfig,
    parse_label_value,
    parse_namespace,
    parse_optional_directory,
    parse_port,
    parse_seconds_between,
    parse_vcsim_arg,
    parse_workers,
    resolve,
)

_LOG_FORMAT = choice("json", "console")
_LOG_LEVEL = choice("debug", "info", "warning", "error", aliases={"warn": "warning"})


def _common_flags(*, log_format: str, metrics: str, probes: str) -> list[FlagSpec]:
    """Flags every role shares (SPEC §5), with the given defaults for logs and listeners."""
    return [
        FlagSpec("--kubeconfig", parse_kubeconfig, None,
                 "kubeconfig file; else KUBECONFIG, else in-cluster, else ~/.kube/config", metavar="PATH"),
        FlagSpec("--namespace", parse_namespace, None, "watch only this namespace (default: all)", metavar="NAMESPACE"),
        FlagSpec("--watch-filter", parse_label_value, None,
                 "reconcile only objects labelled cluster.x-k8s.io/watch-filter=VALUE"),
        FlagSpec("--metrics-bind-address", parse_bind_address, metrics,
                 "host:port of /metrics; 0 disables", metavar="ADDR"),
        FlagSpec("--metrics-secure", parse_bool, "false",
                 "serve /metrics over HTTPS to bearer tokens allowed get on /metrics (TokenReview, "
                 "SubjectAccessReview; bare flag = true)", boolean=True),
        FlagSpec("--metrics-cert-dir", parse_optional_directory, None,
                 "directory with tls.crt and tls.key for --metrics-secure (default: self-signed)", metavar="DIR"),
        FlagSpec("--health-probe-bind-address", parse_bind_address, probes,
                 "host:port of /healthz and /readyz; 0 disables", metavar="ADDR"),
        FlagSpec("--leader-elect", parse_bool, "false",
                 "hold a Lease per role before reconciling (bare flag = true)", boolean=True),
        FlagSpec("--leader-election-namespace", parse_namespace, None,
                 "namespace of the Leases (default: the pod's namespace in-cluster, else default)",
                 metavar="NAMESPACE"),
        FlagSpec("--max-concurrent-reconciles", parse_workers, "32",
                 "workers per controller, 1-1024 (the vspheremachine controller gives one vCenter half: 16 clones at once)",
                 metavar="N"),
        FlagSpec("--log-format", _LOG_FORMAT, log_format, "json or console", metavar="FORMAT"),
        FlagSpec("--log-level", _LOG_LEVEL, "info", "debug, info, warning or error", metavar="LEVEL"),
    ]


VSPHERE_FLAGS = [
    FlagSpec("--vsphere-task-timeout", parse_seconds_between(1, 86400), "600",
             "seconds to wait for one vSphere task (clone, power, destroy)", metavar="SECONDS"),
    FlagSpec("--secret-resync-period", parse_seconds_between(1, 86400), "300",
             "seconds between re-reads of the referenced Secrets and ConfigMaps (credentials refused "
             "by vCenter are re-read at once)", metavar="SECONDS"),
    FlagSpec("--development-allow-http-endpoints", parse_bool, "false",
             "accept http:// Provider endpoints (credentials in clear text; development only)", boolean=True),
    FlagSpec("--allowed-endpoint-cidrs", parse_cidr_list, None,
             "comma-separated CIDRs a Provider endpoint must resolve into before it is dialled (default: any)",
             metavar="CIDRS"),
]
# /metrics on loopback by default (docs/security.md): ":8080" with config/network-policy for Prometheus.
ROLE_FLAGS = _common_flags(log_format="json", metrics="127.0.0.1:8080", probes=":8081")
# dev runs on a workstation: human-readable logs, listeners on loopback only.
DEV_MANAGER_FLAGS = [
    spec for spec in _common_flags(log_format="console", metrics="127.0.0.1:8080", probes="127.0.0.1:8081")
    if spec.flag not in ("--kubeconfig", "--namespace", "--leader-elect", "--leader-election-namespace")
] + VSPHERE_FLAGS
DEV_FLAGS = [
    FlagSpec("--exit-when-ready", parse_bool, "false",
             "exit 0 once the samples are Ready (bare flag = true)", boolean=True),
    FlagSpec("--state-dir", parse_directory, ".banlieue", "directory for kubeconfig, logs and simulator state", metavar="DIR"),
    FlagSpec("--api-port", parse_port, "0", "127.0.0.1 port of the API server (0 = free)", metavar="PORT"),
    FlagSpec("--apiserver", parse_apiserver_kind, "double",
             "double (embedded, no build) or real (kube-apiserver + etcd from 'make envtest')", metavar="KIND"),
    FlagSpec("--vcsim-port", parse_port, "0", "127.0.0.1 port of vcsim (0 = free)", metavar="PORT"),
    FlagSpec("--keep-state", parse_bool, "false",
             "start from the API objects the previous run saved in --state-dir (bare flag = true)", boolean=True),
    FlagSpec("--capi", parse_bool, "false",
             "also real Cluster API (core + kubeadm managers from 'make capi') and a clusterctl repository; "
             "implies --apiserver real (bare flag = true)", boolean=True),
]


@dataclass(frozen=True)
class RoleCommand:
    """``banlieue controller | provider vsphere | manager``: run ``role`` with ``options``."""

    role: Role
    options: Options


@dataclass(frozen=True)
class CrdgenCommand:
    """``banlieue crdgen --out DIR [--rbac-out DIR] [--namespaced-rbac-out DIR] [--admission-out DIR]``.

    Writes the CRD YAML files into ``out``; when given, also the RBAC manifests into ``rbac_out``,
    the per-namespace mode's RBAC (Role + RoleBinding, and the cluster-scoped reads) into
    ``namespaced_rbac_out`` and the ValidatingAdmissionPolicies into ``admission_out`` (all
    generated from banlieue.api).
    """

    out: str
    rbac_out: str | None = None
    admission_out: str | None = None
    namespaced_rbac_out: str | None = None


@dataclass(frozen=True)
class CrddocCommand:
    """``banlieue crddoc [--out FILE]``: write the Markdown API reference (banlieue.api.crddoc) to ``out``."""

    out: str


@dataclass(frozen=True)
class DevCommand:
    """``banlieue dev``: the embedded development environment."""

    dev: DevOptions


@dataclass(frozen=True)
class DevVmsCommand:
    """``banlieue dev vms``: list the VMs of the simulators of the dev environment in ``state_dir``
    (all of them, or the one of Provider ``vcenter``), as ``output`` (``text`` or ``json``)."""

    state_dir: Path
    vcenter: str | None = None
    output: str = "text"


Command = RoleCommand | CrdgenCommand | CrddocCommand | DevCommand | DevVmsCommand


class _Parser(argparse.ArgumentParser):
    """argparse, but errors raise UsageError (one line, exit 2) instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        for placeholder, hint in _MISSING.items():
            if message.endswith("required: " + placeholder):
                raise UsageError(hint)
        raise UsageError(message)


_MISSING = {
    "COMMAND": "missing command: one of controller, provider vsphere, manager, crdgen, crddoc, dev (see banlieue --help)",
    "BACKEND": "missing backend: banlieue provider vsphere",
}


def _add_flags(parser: argparse.ArgumentParser, specs: Sequence[FlagSpec]) -> None:
    for spec in specs:
        shown = f"; default {spec.default}" if spec.default is not None else ""
        help_text = f"{spec.help} (env {spec.env}{shown})"
        if spec.boolean:
            parser.add_argument(spec.flag, nargs="?", const="true", default=None,
                                metavar="true|false", help=help_text)
        else:
            parser.add_argument(spec.flag, default=None, metavar=spec.metavar, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    """The full ``banlieue`` argument parser (its ``error`` raises UsageError)."""
    parser = _Parser(prog="banlieue", description="Kubernetes VirtualMachine API and CAPI provider for vSphere.")
    parser.add_argument("--version", action="version", version=f"banlieue {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    controller = sub.add_parser("controller", help="VirtualMachine and VSphereCluster controllers")
    _add_flags(controller, ROLE_FLAGS)
    provider = sub.add_parser("provider", help="a backend provider's controllers")
    backends = provider.add_subparsers(dest="backend", required=True, metavar="BACKEND")
    vsphere = backends.add_parser("vsphere", help="Provider, VMImage, VSphereMachine(Template) on vSphere")
    _add_flags(vsphere, ROLE_FLAGS + VSPHERE_FLAGS)
    manager = sub.add_parser("manager", help="controller and provider vsphere in one process")
    _add_flags(manager, ROLE_FLAGS + VSPHERE_FLAGS)

    crd = sub.add_parser("crdgen", help="write the CRDs to a directory")
    crd.add_argument("--out", default="config/crd", help="output directory (default config/crd)")
    crd.add_argument("--rbac-out", default=None, help="also write the RBAC manifests here (e.g. config/rbac)")
    crd.add_argument("--admission-out", default=None, help="also write the admission policies here (e.g. config/admission)")
    crd.add_argument("--namespaced-rbac-out", default=None,
                     help="also write the per-namespace mode's RBAC here (e.g. config/namespaced/rbac)")

    doc = sub.add_parser("crddoc", help="write the API reference (Markdown) generated from the models")
    doc.add_argument("--out", default="docs/api-reference.md", help="output file (default docs/api-reference.md)")

    dev = sub.add_parser("dev", help="API-server double + vSphere simulator + manager, on 127.0.0.1")
    _add_flags(dev, DEV_FLAGS + DEV_MANAGER_FLAGS)
    # Repeatable and passed through verbatim, so no BANLIEUE_* fallback (one value per flag).
    dev.add_argument("--vcsim-arg", action="append", default=[], metavar="-FLAG=VALUE", dest="vcsim_args",
                     help="pass a flag to every simulator (bin/vcsim -h lists them); repeatable; write it "
                          "with '=' as the value starts with a dash: --vcsim-arg=-method-delay=CloneVM_Task=5000")
    dev_sub = dev.add_subparsers(dest="dev_command", required=False, metavar="SUBCOMMAND")
    vms = dev_sub.add_parser("vms", help="list the VMs of the running dev environment's simulators (pyVmomi)")
    # Its own dest: a sub-parser's defaults would overwrite `banlieue dev --state-dir X vms`.
    vms.add_argument("--state-dir", dest="vms_state_dir", default=None, metavar="DIR",
                     help="the dev environment's state directory (default: banlieue dev's, .banlieue)")
    vms.add_argument("--vcenter", default=None, metavar="NAME", help="only the simulator of this Provider")
    vms.add_argument("--output", "-o", default="text", choices=("text", "json"), help="text (default) or json")
    return parser


def _resolve_all(specs: Sequence[FlagSpec], args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, Any]:
    return {spec.dest: resolve(spec, getattr(args, spec.dest), env) for spec in specs}


def parse_command(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    home: Path | None = None,
    sa_namespace_file: Path | None = None,
) -> Command:
    """Parse ``argv`` (without the program name) against ``env`` into a validated Command.

    ``home`` and ``sa_namespace_file`` override ``~`` and the in-cluster namespace file (tests).
    Raises UsageError for any invalid flag or ``BANLIEUE_*`` value; ``--help``/``--version``
    raise SystemExit(0) as argparse does.
    """
    args = build_parser().parse_args(list(argv))
    if args.command == "crdgen":
        return CrdgenCommand(out=args.out, rbac_out=args.rbac_out, admission_out=args.admission_out,
                             namespaced_rbac_out=args.namespaced_rbac_out)
    if args.command == "crddoc":
        return CrddocCommand(out=args.out)
    if args.command == "dev" and args.dev_command == "vms":
        state = args.vms_state_dir or resolve(DEV_FLAGS[1], args.state_dir, env)
        return DevVmsCommand(Path(state), args.vcenter, args.output)
    if args.command == "dev":
        values = _resolve_all(DEV_FLAGS + DEV_MANAGER_FLAGS, args, env)
        dev_keys = {spec.dest for spec in DEV_FLAGS}
        manager = Options(**{k: v for k, v in values.items() if k not in dev_keys})
        if values["capi"] and values["apiserver"] == "double" and (args.apiserver is not None or env.get("BANLIEUE_APISERVER")):
            raise UsageError("--capi needs --apiserver real (CAPI's webhooks and CRD conversion need a real kube-apiserver)")
        return DevCommand(DevOptions(
            exit_when_ready=values["exit_when_ready"],
            state_dir=Path(values["state_dir"]),
            api_port=values["api_port"],
            vcsim_port=values["vcsim_port"],
            options=manager,
            vcsim_args=tuple(parse_vcsim_arg(a) for a in args.vcsim_args),
            apiserver="real" if values["capi"] else values["apiserver"],
            keep_state=values["keep_state"],
            capi=values["capi"],
        ))
    role: Role
    if args.command == "controller":
        role, specs = "controller", ROLE_FLAGS
    elif args.command == "provider":
        role, specs = "provider-vsphere", ROLE_FLAGS + VSPHERE_FLAGS
    else:
        role, specs = "manager", ROLE_FLAGS + VSPHERE_FLAGS
    values = _resolve_all(specs, args, env)
    if values["kubeconfig"] is None:
        values["kubeconfig"] = default_kubeconfig(env, home)
    if values["leader_election_namespace"] is None:
        values["leader_election_namespace"] = (
            default_leader_election_namespace(sa_namespace_file)
            if sa_namespace_file is not None else default_leader_election_namespace()
        )
    return RoleCommand(role=role, options=Options(**values))
