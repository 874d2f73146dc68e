"""``bench/e2e.py --apiserver real`` counts banlieue's requests from kube-apiserver's audit log
(``e2e_env.audit_records``), keyed as the API double's request log is (``e2e_load.classify``).

Checked on envtest's kube-apiserver: a ServiceAccount's create, merge patch, server-side apply,
status apply, list, watch and a refused (403) write come back as exactly those records, with
the double's keys (``POST configmaps``, ``PATCH configmaps (merge)``, ``PATCH configmaps (apply)``,
``GET configmaps (watch)``...); another user's requests and the ones before ``since`` are left out.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from banlieue.testing.envtest import Envtest, envtest_binaries_missing
from banlieue.testing.stack import wait_for

pytestmark = [pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing()))]

BENCH = Path(__file__).resolve().parents[2] / "bench"
NS = "bench-audit"
SA = "counted"
USER = f"system:serviceaccount:{NS}:{SA}"


@pytest.fixture(scope="module")
def bench() -> Iterator[tuple[ModuleType, ModuleType]]:
    """(e2e_env, e2e_load) from bench/; the sys.path entry is removed again (bench/ holds
    modules named like installed ones: runtime.py, vsphere.py)."""
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        import e2e_env
        import e2e_load
    finally:
        sys.path[:] = saved
    yield e2e_env, e2e_load


def _call(env: Envtest, token: str, method: str, path: str, body: Any = None,
          content_type: str = "application/json") -> int:
    """One request as the bearer of ``token`` with a user agent of its own; returns the status."""
    req = urllib.request.Request(env.url + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": content_type,
                                          "User-Agent": "bench-audit-test"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=env.ssl_context(admin=False)))
    try:
        with opener.open(req, timeout=30) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_audit_records_count_like_the_double(envtest: Envtest, bench: tuple[ModuleType, ModuleType]) -> None:
    e2e_env, e2e_load = bench
    envtest.ensure_service_account(NS, SA)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": SA, "namespace": NS},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": SA, "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
               "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": NS}]}
    for path, doc in ((f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles", role),
                      (f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", binding)):
        assert envtest.request("POST", path, doc)[0] in (201, 409)
    token = envtest.token_for(NS, SA)
    cms = f"/api/v1/namespaces/{NS}/configmaps"
    # Before `since`: not counted (RBAC may take a moment to reach the authorizer's cache).
    wait_for("RBAC for the counted ServiceAccount", lambda: _call(envtest, token, "GET", cms) == 200, 30, 0.2)
    time.sleep(0.01)
    since = time.time()
    name = f"cm-{time.monotonic_ns()}"
    assert _call(envtest, token, "POST", cms, {"metadata": {"name": name}, "data": {"a": "1"}}) == 201
    assert _call(envtest, token, "PATCH", f"{cms}/{name}", {"data": {"a": "2"}}, "application/merge-patch+json") == 200
    apply = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": NS}, "data": {"a": "3"}}
    assert _call(envtest, token, "PATCH", f"{cms}/{name}?fieldManager=bench&force=true", apply,
                 "application/apply-patch+yaml") == 200
    assert _call(envtest, token, "GET", cms) == 200
    assert _call(envtest, token, "GET", f"{cms}?watch=true&timeoutSeconds=1") == 200
    assert _call(envtest, token, "DELETE", f"{cms}/{name}") == 403  # not in the Role: refused, not a write
    assert envtest.request("PATCH", f"{cms}/{name}", {"data": {"b": "1"}},
                           content_type="application/merge-patch+json")[0] == 200  # admin: another user

    def records() -> list[dict[str, Any]] | None:
        got: list[dict[str, Any]] = e2e_env.audit_records(envtest.audit_events(), USER, since)
        return got if len(got) >= 6 else None

    recs = wait_for("the audit log's records", records, 30, 0.2)
    assert [(r["method"], r["status"]) for r in recs] == [
        ("POST", 201), ("PATCH", 200), ("PATCH", 200), ("GET", 200), ("GET", 200), ("DELETE", 403)]
    assert all(r["user_agent"] == "bench-audit-test" and r["time"] >= since for r in recs)
    assert e2e_load.writes(recs) == {"POST configmaps": 1, "PATCH configmaps (merge)": 1, "PATCH configmaps (apply)": 1}
    assert e2e_load.requests_by(recs) == {
        "POST configmaps": 1, "PATCH configmaps (merge)": 1, "PATCH configmaps (apply)": 1, "GET configmaps": 1,
        "GET configmaps (watch)": 1, "DELETE configmaps": 1}
