"""Which API server a test runs against: the double (``banlieue.testing.apiserver``) or the real
kube-apiserver of :mod:`banlieue.testing.envtest`.

``$BANLIEUE_TEST_APISERVER``: ``double`` or ``real`` switches the e2e and chaos tiers to that
server (the integration and CAPI tiers drive the in-process double directly; the vcsim tier has no
API server); unset, those tiers use the double, and what asks for both through :func:`kinds` (the
e2e suite, three chaos scenarios) runs against both (``real`` skipped, with the reason, when
``make envtest`` has not run).

Public API:

- :func:`selected` -> ``"double"`` | ``"real"`` | None (unset); :func:`kinds` -> the kinds a
  suite parametrizes over (``both_by_default``, ``real_by_default``); :func:`skip_unless_double(fault) <skip_unless_double>`.
- :func:`start_api_server(kind, tmp) <start_api_server>` (context manager) -> :class:`ApiServerUnderTest`:
  ``url``, ``kubeconfig_path`` (all rights: the double has no auth, envtest's is cluster-admin),
  ``request()``, ``install(kubectl)`` (CRDs; on the real server all of config/default but the
  Deployment, server-side, as an operator does), ``manager_kubeconfig(kubectl, tmp)`` (on the
  real server a ServiceAccount token bound only to config/rbac, minted by TokenRequest),
  ``forbidden()`` (403s seen, from the audit log).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .apiserver.fixture import ApiServerProcess, start_subprocess
from .envtest import Envtest, envtest_binaries_missing, start_envtest
from .stack import crd_files, http

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV_VAR = "BANLIEUE_TEST_APISERVER"
KINDS = ("double", "real")
MANAGER_SERVICE_ACCOUNT = ("banlieue-system", "banlieue-manager")
"""The ServiceAccount config/rbac binds the manager's ClusterRoles to (config/rbac/manager.yaml)."""


def selected() -> str | None:
    """``$BANLIEUE_TEST_APISERVER`` (``double`` or ``real``), None when unset. Raises ValueError
    for another value."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if value not in KINDS:
        raise ValueError(f"{ENV_VAR}={value!r}: expected one of {', '.join(KINDS)}")
    return value


def kinds(*, both_by_default: bool = False, real_by_default: bool = False) -> list[str]:
    """The API servers a suite runs against: the selected one; unset, the double, or both when
    ``both_by_default`` (the suites plain ``make test`` runs on the real server too), or only the
    real one when ``real_by_default`` (a scenario the API server plays no part in, where one run
    suffices and the real server is the judge)."""
    chosen = selected()
    if chosen:
        return [chosen]
    if both_by_default:
        return list(KINDS)
    return ["real"] if real_by_default else ["double"]


def skip_unless_double(fault: str) -> pytest.MarkDecorator:
    """Skip on the real server a test that drives the double's fault injection ``fault``."""
    return pytest.mark.skipif(selected() == "real",
                              reason=f"drives the API double's fault injection ({fault}); kube-apiserver has none")


@dataclass
class ApiServerUnderTest:
    """A running API server of ``kind`` ``double`` or ``real``."""

    kind: str
    url: str
    kubeconfig_path: Path
    double: ApiServerProcess | None = None
    envtest: Envtest | None = None

    def request(self, method: str, path: str, body: Any = None, timeout: float = 15.0,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One request with all rights (see :func:`banlieue.testing.stack.http` for the answer)."""
        if self.envtest is not None:
            return self.envtest.request(method, path, body, timeout=timeout, content_type=content_type)
        return http(method, self.url + path, body, timeout=timeout, content_type=content_type)

    def kubectl(self, kubectl: str, *args: str, stdin: str | None = None,
                timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``kubectl --kubeconfig <all rights> ARGS`` (not checked)."""
        return subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig_path), *args], input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)

    def install(self, kubectl: str) -> None:
        """Install banlieue's API. Double: config/crd with ``kubectl apply --validate=false`` (the
        double serves no OpenAPI v3 for kubectl to validate against). Real: ``kubectl kustomize
        config/default`` without the Deployment (the manager runs here as a process), applied
        with ``kubectl apply --server-side`` as an operator would, then every CRD Established.
        Raises AssertionError with kubectl's stderr."""
        if self.envtest is None:
            args = [a for p in crd_files() for a in ("-f", str(p))]
            proc = self.kubectl(kubectl, "apply", "--validate=false", *args)
            assert proc.returncode == 0, proc.stderr
            return
        rendered = self.kubectl(kubectl, "kustomize", str(REPO_ROOT / "config/default"))
        assert rendered.returncode == 0, rendered.stderr
        docs = [d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") != "Deployment"]
        proc = self.kubectl(kubectl, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(docs))
        assert proc.returncode == 0, proc.stderr
        proc = self.kubectl(kubectl, "wait", "--for=condition=Established", "--timeout=60s",
                            *[f"crd/{d['metadata']['name']}" for d in docs if d["kind"] == "CustomResourceDefinition"])
        assert proc.returncode == 0, proc.stderr

    def manager_kubeconfig(self, kubectl: str, tmp: Path,
                           service_account: tuple[str, str] = MANAGER_SERVICE_ACCOUNT) -> Path:
        """The kubeconfig ``banlieue manager`` runs with. Double: the all-rights one (it has no
        auth). Real: a token of ``service_account`` (TokenRequest, 1 h) which config/rbac binds
        to the generated ClusterRoles, never cluster-admin; config/rbac is applied (server-side)
        when :meth:`install` has not."""
        if self.envtest is None:
            return self.kubeconfig_path
        proc = self.kubectl(kubectl, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": service_account[0]}}]))
        assert proc.returncode == 0, proc.stderr
        proc = self.kubectl(kubectl, "apply", "--server-side", "-k", str(REPO_ROOT / "config/rbac"))
        assert proc.returncode == 0, proc.stderr
        token = self.envtest.token_for(*service_account)
        return self.envtest.write_token_kubeconfig(tmp / f"kubeconfig-{service_account[1]}", token)

    def forbidden(self) -> list[dict[str, Any]]:
        """Audit events answered 403 for any ServiceAccount (real server; [] on the double,
        which authorizes everything)."""
        return self.envtest.forbidden() if self.envtest is not None else []


@contextlib.contextmanager
def start_api_server(kind: str, tmp: Path, *, bookmark_interval: float = 5.0) -> Iterator[ApiServerUnderTest]:
    """Start the double (own process, watch bookmarks every ``bookmark_interval`` s) or envtest
    (files under ``tmp/envtest``, logs kept there); skip the test when envtest's binaries are
    missing. Stopped on exit."""
    if kind == "double":
        with start_subprocess(bookmark_interval=bookmark_interval) as api:
            yield ApiServerUnderTest("double", api.url, api.kubeconfig_path, double=api)
        return
    reason = envtest_binaries_missing()
    if reason:
        pytest.skip(reason)
    with start_envtest(tmp / "envtest", keep_logs=True) as env:
        yield ApiServerUnderTest("real", env.url, env.kubeconfig_path, envtest=env)
