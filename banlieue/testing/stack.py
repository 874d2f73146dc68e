"""Process harness of the end-to-end and chaos suites: ``banlieue <role>`` as a subprocess.

The API-server double runs in its own process (:func:`banlieue.testing.apiserver.fixture.start_subprocess`)
and vcsim in its own (:func:`banlieue.testing.vcsim.start_vcsim`); this module starts banlieue
itself against the double's kubeconfig, on free 127.0.0.1 ports, waits for its ``/readyz``,
stops it (SIGTERM, then SIGKILL after a grace period), and reads its probes and metrics. It also
holds the small plain-HTTP helpers every such test needs (no proxies, JSON decoded).

Public API:

- ``start_banlieue(kubeconfig, log, role="manager", *flags, ...) -> BanlieueProcess``
- ``BanlieueProcess``: ``alive()``, ``healthz()``, ``readyz()``, ``wait_ready(timeout)``,
  ``kill(sig)``, ``restart()``, ``stop(timeout) -> bool``, ``tail(lines)``, ``metrics()``.
- ``http(method, url, body=None, timeout=15.0) -> (status, JSON or text)``; status 0 = no answer.
- ``wait_for(what, fn, timeout, interval=0.5) -> T``: poll until truthy, else ``pytest.fail``.
- ``condition(obj, type) -> dict``: one entry of ``status.conditions`` (CAPI/metav1 Condition).
- ``crd_files() -> list[Path]``: the CustomResourceDefinitions of ``config/crd``.

All times are seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from banlieue.cmd.dev import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")

STOP_GRACE = 40.0
"""Seconds a process gets after SIGTERM before SIGKILL (the manager's own shutdown is bounded
well below this: it releases its Leases and drains its workers)."""


def http(method: str, url: str, body: Any = None, timeout: float = 15.0,
         content_type: str = "application/json") -> tuple[int, Any]:
    """One request without proxies (``ProxyHandler({})``: a test never goes through $http_proxy).

    ``body`` is sent as JSON when not None; ``timeout`` is in seconds. Returns ``(status,
    decoded JSON)``, or ``(status, text)`` when the answer is not JSON; an HTTP error status is
    returned, not raised; ``(0, None)`` means no answer (connection refused, reset, timeout).
    """
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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


def wait_for(what: str, fn: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Call ``fn`` every ``interval`` seconds until it returns a truthy value, and return it.

    Fails the test (``pytest.fail``) naming ``what`` and the last value (first 2,000 characters
    of its repr) when ``timeout`` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"{what}: not within {timeout:g} s (last value {repr(last)[:2000]})")


def condition(obj: dict[str, Any] | None, kind: str = "Ready") -> dict[str, Any]:
    """The condition of type ``kind`` in ``obj["status"]["conditions"]`` (metav1.Condition /
    CAPI Condition shape), or ``{}`` when ``obj`` is None or has no such condition."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return {}


def crd_files(crd_dir: Path = REPO_ROOT / "config/crd") -> list[Path]:
    """The YAML files of ``crd_dir`` that hold a CustomResourceDefinition, sorted by name."""
    return sorted(p for p in crd_dir.glob("*.yaml")
                  if (yaml.safe_load(p.read_text()) or {}).get("kind") == "CustomResourceDefinition")


@dataclass
class BanlieueProcess:
    """One ``banlieue <role>`` process; stdout and stderr go to ``log`` (appended on restart).

    ``probes_url`` is ``http://127.0.0.1:<port>`` (``/healthz``, ``/readyz``); ``metrics_url``
    is the full ``.../metrics`` URL, or ``""`` when started with the metrics listener off.
    ``starts`` counts the starts (1 + restarts).
    """

    argv: list[str]
    log: Path
    probes_url: str
    process: subprocess.Popen[bytes]
    metrics_url: str = ""
    starts: int = 1

    @property
    def pid(self) -> int:
        """The OS process id of the current start."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), None while running."""
        return self.process.returncode

    def alive(self) -> bool:
        """True while the process has not exited."""
        return self.process.poll() is None

    def healthz(self) -> int:
        """HTTP status of ``GET /healthz`` (0 = no answer within 5 s)."""
        return http("GET", self.probes_url + "/healthz", timeout=5)[0]

    def readyz(self) -> int:
        """HTTP status of ``GET /readyz`` (0 = no answer within 5 s)."""
        return http("GET", self.probes_url + "/readyz", timeout=5)[0]

    def metrics(self) -> tuple[int, Any]:
        """``GET`` of the Prometheus text page: ``(status, text)`` as :func:`http` returns it."""
        assert self.metrics_url, "started with --metrics-bind-address 0"
        return http("GET", self.metrics_url)

    def wait_ready(self, timeout: float = 40.0) -> None:
        """Wait until ``/readyz`` answers 200; fails the test when it does not within ``timeout``
        seconds or the process exits first (with the tail of its log)."""
        wait_for(f"banlieue pid {self.pid} /readyz", lambda: not self.alive() or self.readyz() == 200, timeout)
        assert self.alive(), f"banlieue exited with {self.process.returncode}:\n{self.tail()}"

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig``; for SIGKILL and SIGTERM also wait (up to :data:`STOP_GRACE` s) for the exit."""
        if self.alive():
            self.process.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.process.wait(timeout=STOP_GRACE)

    def restart(self) -> None:
        """SIGKILL the process (when alive) and start it again with the same argv and log."""
        self.kill()
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(self.argv, stdout=sink, stderr=sink, stdin=subprocess.DEVNULL,
                                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.starts += 1

    def stop(self, timeout: float = STOP_GRACE) -> bool:
        """SIGCONT (a SIGSTOPped process could not act on the next signal) then SIGTERM, and wait
        ``timeout`` seconds; SIGKILL after that. Returns False when SIGKILL was needed, True
        otherwise (also when it had exited already). Safe to call more than once."""
        if not self.alive():
            return True
        self.process.send_signal(signal.SIGCONT)
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            return False
        return True

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the log."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def start_banlieue(kubeconfig: Path, log: Path, role: str = "manager", *flags: str,
                   leader_election_namespace: str | None = "default", metrics: bool = True,
                   log_format: str = "json", log_level: str | None = None,
                   entry: Sequence[str] = ("-m", "banlieue.cli"),
                   extra_env: Mapping[str, str] | None = None) -> BanlieueProcess:
    """Start ``python -m banlieue.cli <role> --kubeconfig <kubeconfig> ... <flags>`` and return
    at once (call :meth:`BanlieueProcess.wait_ready` to wait for ``/readyz``).

    ``role`` may be several words (``"provider vsphere"``). The probe listener is on a free
    127.0.0.1 port; so is the metrics listener when ``metrics`` (else ``--metrics-bind-address 0``).
    ``leader_election_namespace`` not None adds ``--leader-elect --leader-election-namespace``.
    Output (``--log-format``, ``--log-level`` when given) is appended to ``log``; Python runs
    unbuffered so that a killed process has logged everything up to its end. ``entry`` is what
    follows the interpreter (a wrapper script such as bench/e2e_memprobe.py takes the CLI's
    place); ``extra_env`` is added to the inherited environment.
    """
    probes, metrics_port = free_ports(2) if metrics else (free_ports(1)[0], 0)
    argv = [sys.executable, *entry, *role.split(), "--kubeconfig", str(kubeconfig),
            "--metrics-bind-address", f"127.0.0.1:{metrics_port}" if metrics else "0",
            "--health-probe-bind-address", f"127.0.0.1:{probes}", "--log-format", log_format]
    if log_level is not None:
        argv += ["--log-level", log_level]
    if leader_election_namespace is not None:
        argv += ["--leader-elect", "--leader-election-namespace", leader_election_namespace]
    argv += flags
    with log.open("ab") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=sink, stdin=subprocess.DEVNULL,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {})})
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics" if metrics else ""
    return BanlieueProcess(argv, log, f"http://127.0.0.1:{probes}", process, metrics_url)
