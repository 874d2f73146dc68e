"""banlieue's release as a clusterctl local repository, and the real ``bin/clusterctl`` (``make
capi``) run against it: what the clusterctl tests, ``banlieue dev --capi`` and the README use.

The repository is what ``REPO_DIR=<dir> hack/release.sh`` (``make clusterctl-repo``) writes::

    <dir>/clusterctl.yaml                                   providers: banlieue -> file://…
    <dir>/infrastructure-banlieue/<tag>/infrastructure-components.yaml
    <dir>/infrastructure-banlieue/<tag>/metadata.yaml       release series -> contract v1beta2
    <dir>/infrastructure-banlieue/<tag>/cluster-template[-<flavor>].yaml

clusterctl reads it with ``--config <dir>/clusterctl.yaml`` (clusterctl's "local repository":
a provider whose ``url`` is a ``file://`` path ``…/<provider-label>/<version>/<components file>``).
``clusterctl init`` cannot run on the test tier (it installs cert-manager Pods, and nothing runs
Pods without a kubelet); ``generate provider``, ``generate cluster`` and ``describe cluster`` only
need the files and the API server.

Network rule: every command runs with ``CLUSTERCTL_DISABLE_VERSIONCHECK=true`` (also in the
repository's ``clusterctl.yaml``; without it clusterctl asks GitHub for a newer release) and
``XDG_CONFIG_HOME`` in the repository directory (clusterctl's own state never lands in ``~``);
the only address it may dial is the ``--kubeconfig``'s API server, which tests keep on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from banlieue.testing.capi import REPO_ROOT, binary

PROVIDER_LABEL = "infrastructure-banlieue"
"""clusterctl's name of the provider (``<type>-<name>``): the repository's directory and the
``cluster.x-k8s.io/provider`` label every component carries."""
DEFAULT_IMAGE = "banlieue:v0.1.0"
TIMEOUT = 60.0  # seconds for one clusterctl or release.sh run


class ClusterctlError(RuntimeError):
    """clusterctl or hack/release.sh exited non-zero; the message holds its stderr."""


@dataclass(frozen=True)
class Repository:
    """A clusterctl local repository written by ``hack/release.sh`` (see the module docstring)."""

    root: Path
    version: str

    @property
    def config(self) -> Path:
        """The clusterctl configuration naming the repository (``--config``)."""
        return self.root / "clusterctl.yaml"

    @property
    def release_dir(self) -> Path:
        return self.root / PROVIDER_LABEL / self.version

    def flavors(self) -> list[str]:
        """Flavour names, ``""`` for the default ``cluster-template.yaml``, sorted."""
        names = (p.name.removeprefix("cluster-template").removesuffix(".yaml") for p in self.release_dir.glob("cluster-template*.yaml"))
        return sorted(n.removeprefix("-") for n in names)


def write_repository(root: Path, image: str = DEFAULT_IMAGE) -> Repository:
    """Run ``REPO_DIR=root BANLIEUE_IMAGE=image hack/release.sh``; the version is ``image``'s tag.

    Raises ClusterctlError with the script's stderr when it fails (e.g. kubectl missing)."""
    env = {**os.environ, "REPO_DIR": str(root), "BANLIEUE_IMAGE": image}
    proc = subprocess.run(["bash", str(REPO_ROOT / "hack" / "release.sh")], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if proc.returncode != 0:
        raise ClusterctlError(f"hack/release.sh: {proc.stderr.strip()}")
    return Repository(root.resolve(), image.rsplit(":", 1)[1])


def clusterctl_env(repo: Repository, variables: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment clusterctl runs with: this process's, minus any ``KUBECONFIG`` (the
    management cluster is always given with ``--kubeconfig``), plus ``variables`` (clusterctl
    reads template variables from the environment), the version check off and clusterctl's
    state directory inside the repository."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(variables or {})
    env.update({"CLUSTERCTL_DISABLE_VERSIONCHECK": "true", "XDG_CONFIG_HOME": str(repo.root / ".config")})
    return env


def run(repo: Repository, *args: str, kubeconfig: Path | None = None, variables: Mapping[str, str] | None = None,
        wrap: Sequence[str] = ()) -> str:
    """``bin/clusterctl ARGS --config <repo>/clusterctl.yaml [--kubeconfig K]``; returns stdout.

    ``wrap`` prefixes the command (e.g. ``strace -f -e trace=connect -o FILE``). Raises
    ClusterctlError with clusterctl's stderr on a non-zero exit, CapiUnavailable when
    ``bin/clusterctl`` is missing (``make capi``)."""
    argv = [*wrap, str(binary("clusterctl")), *args, "--config", str(repo.config)]
    if kubeconfig is not None:
        argv += ["--kubeconfig", str(kubeconfig)]
    proc = subprocess.run(argv, env=clusterctl_env(repo, variables), cwd=repo.root, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    if proc.returncode != 0:
        raise ClusterctlError(f"clusterctl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def generate_cluster_args(name: str, *, flavor: str = "", namespace: str | None = None, kubernetes_version: str | None = None,
                          control_plane_machines: int = 1, worker_machines: int = 0, version: str | None = None) -> list[str]:
    """The arguments of ``clusterctl generate cluster NAME --infrastructure banlieue …`` (``version``
    pins ``banlieue:<version>``: without a management cluster clusterctl cannot discover it;
    without ``kubernetes_version``, ``KUBERNETES_VERSION`` is a variable like the others)."""
    infra = f"banlieue:{version}" if version else "banlieue"
    args = ["generate", "cluster", name, "--infrastructure", infra,
            "--control-plane-machine-count", str(control_plane_machines), "--worker-machine-count", str(worker_machines)]
    if kubernetes_version:
        args += ["--kubernetes-version", kubernetes_version]
    if flavor:
        args += ["--flavor", flavor]
    if namespace:
        args += ["--target-namespace", namespace]
    return args


def parse_variables(listing: str) -> tuple[set[str], dict[str, str]]:
    """``clusterctl generate cluster --list-variables`` output -> (required names, optional name ->
    its default as printed, quotes removed)."""
    required: set[str] = set()
    optional: dict[str, str] = {}
    section = None
    for line in listing.splitlines():
        if line.startswith("Required Variables"):
            section = "required"
        elif line.startswith("Optional Variables"):
            section = "optional"
        elif match := re.fullmatch(r"\s+- (\S+)(?:\s+\(defaults to (.*)\))?", line):
            if section == "required":
                required.add(match.group(1))
            elif section == "optional":
                optional[match.group(1)] = (match.group(2) or "").strip('"')
    return required, optional


def documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents of clusterctl's output (empty ones dropped)."""
    return [d for d in yaml.safe_load_all(text) if d]


_OBJECT = re.compile(r"^[\s│├└─]*([A-Z][A-Za-z0-9]*) (?:([a-z0-9.-]+)/)?([a-z0-9.-]+)\b")
_CONDITION = re.compile(r"^[\s│]*[├└]─([A-Z][A-Za-z0-9]*)\s+(True|False|Unknown)\s+(\S+)\s+\S+\s*(.*?)\s*$")


@dataclass(frozen=True)
class Condition:
    """One condition line of ``clusterctl describe cluster --show-conditions all``."""

    status: str
    reason: str
    message: str


def parse_describe(text: str) -> dict[tuple[str, str], dict[str, Condition]]:
    """``clusterctl describe cluster --show-conditions all`` output (CAPI v1.14's tree: an object
    line ``Kind namespace/name[, version] COLUMNS``, then one ``├─Type Status Reason Since Message``
    line per condition) -> {(kind, name): {type: Condition}}; continuation lines of a message are
    not kept. Group nodes (``Workers``, ``ControlPlane`` headers without a name) are skipped."""
    objects: dict[tuple[str, str], dict[str, Condition]] = {}
    current: dict[str, Condition] | None = None
    for line in text.splitlines()[1:]:  # the header names the columns
        if cond := _CONDITION.match(line):
            if current is not None:
                current[cond.group(1)] = Condition(cond.group(2), cond.group(3), cond.group(4))
            continue
        if (obj := _OBJECT.match(line)) and obj.group(2) is not None:
            current = objects.setdefault((obj.group(1), obj.group(3)), {})
    return objects
