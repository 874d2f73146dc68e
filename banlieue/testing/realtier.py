"""The integration tier on the real API server: what ``BANLIEUE_TEST_APISERVER=real`` puts behind
the ``apiserver`` fixture of tests/integration (issue 16).

The integration tests talk to "the API server" through ``apiserver.url`` (plain HTTP, no
credentials: ``config_for_url``), ``apiserver.kubeconfig_path`` and a few calls on
``apiserver.server``. On the real server they get, for the whole session:

- envtest's kube-apiserver (the session's ``envtest`` fixture: etcd, kube-apiserver with RBAC and
  admission, kube-controller-manager), with banlieue's API installed once as an operator would
  (``kubectl kustomize config/default`` minus the Deployment, ``kubectl apply --server-side``:
  CRDs, admission policies, RBAC), every CRD Established;
- ``kubectl proxy`` on 127.0.0.1 in front of it with the cluster-admin kubeconfig: the tests' plain
  HTTP URL. ``kubectl proxy`` forwards each request as is (watches streamed, bookmarks and 410s
  from kube-apiserver), adding only the credentials, so the tests' clients need no TLS setup;
- per test, a :class:`RealApiServerHandle` (``url``, ``kubeconfig_path``, ``server``): tests keep
  their own fresh namespace (tests/integration/conftest.py ``namespace``) on the shared server.

``server`` (:class:`RealServer`) does on kube-apiserver what the double's ``ApiServer`` does where
a real server can: ``load_crd_dir`` / ``load_crd`` (apply, wait Established) and ``request_log``
(read from kube-apiserver's audit log, from the start of the test: :meth:`RealServer.mark_requests`).
What only the double has (fault injection, its in-memory store, compaction on demand) skips the
test, the reason naming it: :func:`skip_double_only`.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from banlieue.testing.processes import terminate

from .apiserver.fixture import write_kubeconfig
from .apiserver.server import RequestRecord
from .apiservers import REPO_ROOT
from .envtest import Envtest

PROXY_STARTUP_TIMEOUT = 30.0  # seconds
KUBECTL_TIMEOUT = 120.0  # seconds per kubectl call
AUDIT_VERB_METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT",
                      "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE"}
"""The HTTP method of each audit ``verb`` (k8s.io/apiserver request info: the verb is derived from
the method and the path, so this inverse is exact for resource requests)."""


def skip_double_only(what: str) -> NoReturn:
    """Skip the running test on the real server: it drives ``what``, which only the API double has."""
    pytest.skip(f"drives the API double's {what}; kube-apiserver has none")


def kubectl_binary() -> str:
    """The ``kubectl`` on PATH; skips the test when there is none."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl not installed (needed for the real-server tier)")
    return found


@dataclass
class RealServer:
    """``apiserver.server`` on the real API server (module docstring)."""

    kubeconfig_path: Path
    """Cluster-admin kubeconfig of envtest (client certificate)."""
    audit_log: Path | None = None
    """kube-apiserver's audit log (JSON lines, every request at level Metadata, written before
    the answer: ``--audit-log-mode blocking``); None: ``request_log`` skips the test."""
    loaded: set[str] = field(default_factory=set)
    _audit_offset: int = 0

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """``kubectl --kubeconfig <admin> ARGS``; AssertionError with stderr when it fails."""
        proc = subprocess.run([kubectl_binary(), "--kubeconfig", str(self.kubeconfig_path), *args], input=stdin,
                              capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr.strip()}"
        return proc

    def load_crd(self, crd: dict[str, Any]) -> None:
        """Apply one CustomResourceDefinition (server-side, force-conflicts: tests may load the same
        CRD again) and wait until it is Established."""
        name = crd["metadata"]["name"]
        if name in self.loaded:
            return
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(crd))
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
        self.loaded.add(name)

    def load_crd_dir(self, crd_dir: str | Path) -> None:
        """Apply every CRD in ``crd_dir`` (``*.yaml`` but Kustomization) once per session."""
        key = str(Path(crd_dir).resolve())
        if key in self.loaded:
            return
        for path in sorted(Path(crd_dir).glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    self.load_crd(doc)
        self.loaded.add(key)

    def install_banlieue(self) -> None:
        """banlieue's API as an operator installs it: config/default minus the Deployment,
        server-side; every CRD Established."""
        rendered = self.kubectl("kustomize", str(REPO_ROOT / "config/default"))
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") != "Deployment"]
        self.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs))
        crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}" for c in crds])
        self.loaded.update(crds)
        self.loaded.add(str((REPO_ROOT / "config/crd").resolve()))

    def clear_custom_resources(self, envtest: Envtest) -> None:
        """Delete every custom resource on the server (every CRD's storage version, all
        namespaces), finalizers dropped: each test starts without any, as on a fresh double.
        Cluster-scoped ones (VMClass, VMImage) and controllers that read across namespaces (a
        VMImage matches every Provider) would otherwise see the previous tests' objects; the
        namespaces themselves stay (built-in objects in them are the test's own)."""
        status, crds = envtest.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        if status != 200:
            return
        for crd in crds.get("items", []):
            spec = crd["spec"]
            version = next((v["name"] for v in spec["versions"] if v.get("storage")), spec["versions"][0]["name"])
            path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
            status, listing = envtest.request("GET", path)
            if status != 200:
                continue
            for item in listing.get("items", []):
                meta = item["metadata"]
                obj = (f"/apis/{spec['group']}/{version}/namespaces/{meta['namespace']}/{spec['names']['plural']}/{meta['name']}"
                       if meta.get("namespace") else f"{path}/{meta['name']}")
                if meta.get("finalizers"):
                    envtest.request("PATCH", obj, {"metadata": {"finalizers": None}},
                                    content_type="application/merge-patch+json")
                envtest.request("DELETE", obj)

    def mark_requests(self) -> None:
        """Start :meth:`request_log` here: it sees only the requests answered after this call (the
        ``apiserver`` fixture calls it when a test starts; the server is shared by the session)."""
        if self.audit_log is not None:
            with contextlib.suppress(FileNotFoundError):
                self._audit_offset = self.audit_log.stat().st_size

    def request_log(self, *, method: str | None = None, path_contains: str | None = None) -> list[RequestRecord]:
        """The double's ``ApiServer.request_log`` on kube-apiserver: the requests answered since
        :meth:`mark_requests`, oldest first, optionally filtered by HTTP method and path substring,
        read from the audit log (one ``ResponseComplete``/``Panic`` event per request: a watch is
        counted when it ends). ``time`` is the request's arrival (``requestReceivedTimestamp``),
        ``duration`` until ``stageTimestamp``. Skips the test when there is no audit log."""
        if self.audit_log is None:
            skip_double_only("request log (ApiServer.request_log: no audit log on this server)")
        out: list[RequestRecord] = []
        with contextlib.suppress(FileNotFoundError), self.audit_log.open("rb") as fh:
            if fh.seek(0, 2) >= self._audit_offset:  # smaller: the log was rotated, read it all
                fh.seek(self._audit_offset)
            else:
                fh.seek(0)
            for line in fh:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line being written
                if event.get("stage") not in ("ResponseComplete", "Panic"):
                    continue
                verb_method = AUDIT_VERB_METHODS.get(str(event.get("verb", "")), str(event.get("verb", "")).upper())
                path, _, query = str(event.get("requestURI", "")).partition("?")
                if (method is not None and verb_method != method) or (path_contains is not None and path_contains not in path):
                    continue
                received = _audit_time(event.get("requestReceivedTimestamp"))
                out.append(RequestRecord(method=verb_method, path=path, query=query,
                                         status=int((event.get("responseStatus") or {}).get("code") or 0),
                                         time=received, duration=max(0.0, _audit_time(event.get("stageTimestamp")) - received),
                                         user_agent=str(event.get("userAgent", ""))))
        out.sort(key=lambda r: r.time)
        return out

    # What only the double has: the test is skipped, naming it.
    @property
    def faults(self) -> NoReturn:
        skip_double_only("fault injection (ApiServer.faults)")

    @property
    def store(self) -> NoReturn:
        skip_double_only("in-memory store (ApiServer.store)")

    def compact(self, *args: Any, **kwargs: Any) -> NoReturn:
        skip_double_only("compaction on demand (ApiServer.compact)")

    def drop_watches(self, *args: Any, **kwargs: Any) -> NoReturn:
        skip_double_only("fault injection (ApiServer.drop_watches)")


def _audit_time(value: Any) -> float:
    """An audit event's RFC 3339 timestamp (``2026-12-02T00:56:41.123456Z``) as seconds since the
    epoch; 0.0 when missing."""
    if not value:
        return 0.0
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


@dataclass
class RealApiServerHandle:
    """What the ``apiserver`` fixture yields on the real server: ``url`` (``kubectl proxy``, plain
    HTTP), ``kubeconfig_path`` (to that URL, no credentials needed), ``server``
    (:class:`RealServer`) and ``envtest``."""

    server: RealServer
    url: str
    kubeconfig_path: Path
    envtest: Envtest


@contextlib.contextmanager
def kubectl_proxy(kubeconfig: Path) -> Iterator[str]:
    """``kubectl proxy`` on a free 127.0.0.1 port with ``kubeconfig``'s credentials; yields its
    URL (``http://127.0.0.1:<port>``); terminated on exit. Raises RuntimeError (with kubectl's
    output) when it does not report its address within :data:`PROXY_STARTUP_TIMEOUT` s."""
    proc = subprocess.Popen(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), "proxy", "--address=127.0.0.1", "--port=0",
         "--accept-hosts=^(127\\.0\\.0\\.1|localhost)$", "--keepalive=30s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + PROXY_STARTUP_TIMEOUT
        seen: list[str] = []
        url = None
        while url is None:
            line = proc.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"kubectl proxy did not start: {' '.join(seen)[-500:]}")
            seen.append(line.strip())
            match = re.search(r"Starting to serve on (127\.0\.0\.1:\d+)", line)
            if match:
                url = f"http://{match.group(1)}"
        yield url
    finally:
        terminate(proc)


@contextlib.contextmanager
def real_integration_server(envtest: Envtest, tmp: Path) -> Iterator[tuple[RealServer, str, Path]]:
    """banlieue installed on ``envtest`` and ``kubectl proxy`` in front of it: yields
    ``(server, proxy URL, kubeconfig of the proxy URL)`` for the session."""
    server = RealServer(envtest.kubeconfig_path, audit_log=envtest.audit_log)
    server.install_banlieue()
    with kubectl_proxy(envtest.kubeconfig_path) as url:
        yield server, url, write_kubeconfig(tmp / "kubeconfig-proxy", url, context="envtest-proxy")
