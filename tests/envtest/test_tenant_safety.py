"""Tenant safety on kube-apiserver (issue 23, docs/security.md): a tenant holding only the Roles
the case names - a ServiceAccount token bound to them, used through kubectl - cannot reach through
banlieue what it could not reach itself.

The tenant (``tenant/writer``) may write Providers, VirtualMachines, VSphereMachines and
VSphereMachineTemplates of namespace ``tenant`` and ``get`` only its own Secret ``tenant-creds``;
the namespace also holds the administrator's ``admin-creds``. banlieue is installed from
config/default (CRDs, RBAC, admission policies), as an operator installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from banlieue.api.admission import RAW_PLACEMENT_VERB
from banlieue.api.rbac import MANAGER_SERVICE_ACCOUNT, METRICS_READER_ROLE
from banlieue.api.rbac import NAMESPACE as MANAGER_NAMESPACE
from banlieue.runtime.client import Client
from banlieue.runtime.config import load_config
from banlieue.runtime.manager import Manager
from banlieue.testing.apiservers import ApiServerUnderTest
from banlieue.testing.envtest import Envtest, envtest_binaries_missing

from .test_admission import Kubectl, kubectl_path

pytestmark = [pytest.mark.kubectl,
              pytest.mark.skipif(envtest_binaries_missing() is not None, reason=str(envtest_binaries_missing())),
              pytest.mark.skipif(kubectl_path() is None, reason="kubectl not installed")]

NS = "tenant"
WRITE = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _role(name: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "namespace": NS}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]},
    ]


def _secret(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
            "stringData": {"username": "u", "password": "p", "ca.crt": "pem"}}


def _provider(name: str, creds: str, endpoint: str = "https://127.0.0.1:1/sdk", **extra: Any) -> dict[str, Any]:
    connection: dict[str, Any] = {"endpoint": endpoint, "credentialsRef": {"name": creds}, **extra}
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "Provider", "metadata": {"name": name, "namespace": NS},
            "spec": {"providerClassRef": {"name": "vsphere"}, "connection": connection}}


def _vm(name: str, secret: str) -> dict[str, Any]:
    return {"apiVersion": "banlieue.io/v1alpha1", "kind": "VirtualMachine", "metadata": {"name": name, "namespace": NS},
            "spec": {"classRef": {"name": "small"}, "imageRef": {"name": "ubuntu"},
                     "userData": {"secretRef": {"name": secret}}}}


def _machine(name: str, **disk: str) -> dict[str, Any]:
    return {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachine",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"providerRef": {"name": "p"}, "template": "ubuntu",
                     "disks": [{"name": "root", "sizeGiB": 10, **disk}]}}


class Tenant:
    """kubectl as the admin (``admin``) and as ServiceAccounts holding only given Roles."""

    def __init__(self, envtest: Envtest, admin: Kubectl, tmp: Path) -> None:
        self.envtest, self.admin, self.tmp = envtest, admin, tmp

    def as_sa(self, name: str) -> Kubectl:
        self.envtest.ensure_service_account(NS, name)
        path = self.envtest.write_token_kubeconfig(self.tmp / f"{name}.kubeconfig", self.envtest.token_for(NS, name), namespace=NS)
        return Kubectl(ApiServerUnderTest("real", self.envtest.url, path, envtest=self.envtest))


@pytest.fixture(scope="module")
def tenant(envtest: Envtest, tmp_path_factory: pytest.TempPathFactory) -> Tenant:
    api = ApiServerUnderTest("real", envtest.url, envtest.kubeconfig_path, envtest=envtest)
    admin = Kubectl(api)
    api.install(admin.kubectl)
    admin.run("create", "namespace", NS)
    t = Tenant(envtest, admin, tmp_path_factory.mktemp("tenant"))
    writer_rules = [
        {"apiGroups": ["banlieue.io"], "resources": ["providers", "virtualmachines"], "verbs": WRITE},
        {"apiGroups": ["infrastructure.banlieue.io"], "resources": ["vspheremachines", "vspheremachinetemplates"], "verbs": WRITE},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["tenant-creds"]},
    ]
    placer_rules = [*writer_rules, {"apiGroups": ["infrastructure.banlieue.io"], "resources": ["vspheremachines"],
                                    "verbs": [RAW_PLACEMENT_VERB]}]
    admin.ok("apply", "--server-side", "-f", "-", docs=[
        _secret("admin-creds"), _secret("tenant-creds"), *_role("writer", writer_rules), *_role("placer", placer_rules)])
    # Policies and RBAC take effect a moment after they are created: wait until the writer is
    # refused what the policy refuses (dry run), or fail after 30 s.
    writer = t.as_sa("writer")
    deadline = time.monotonic() + 30
    while writer.run("apply", "--server-side", "--dry-run=server", "-f", "-",
                     docs=[_provider("probe", "admin-creds")]).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return t


def test_provider_pointing_at_a_secret_the_writer_cannot_read_is_refused(tenant: Tenant) -> None:
    writer = tenant.as_sa("writer")
    # The writer really cannot read it: the precondition of the case.
    assert "forbidden" in writer.rejected("get", "secret", "admin-creds")
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[_provider("stolen", "admin-creds")])
    assert "banlieue-provider-secret-access" in err and "credentialsRef" in err, err
    # Its own Secret: accepted.
    writer.ok("apply", "--server-side", "-f", "-", docs=[_provider("own", "tenant-creds")])
    # A CA from a Secret it cannot read: refused.
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[
        _provider("own", "tenant-creds", caBundle={"secretRef": {"name": "admin-creds", "key": "ca.crt"}})])
    assert "caBundle.secretRef" in err, err


def test_changing_the_endpoint_of_an_admin_provider_is_refused(tenant: Tenant) -> None:
    tenant.admin.ok("apply", "--server-side", "-f", "-", docs=[_provider("admins", "admin-creds")])
    writer = tenant.as_sa("writer")
    for patch in ({"endpoint": "https://127.0.0.2:1/sdk"}, {"insecureSkipTLSVerify": True}):
        err = writer.rejected("patch", "provider", "admins", "--type=merge", "-p", json.dumps({"spec": {"connection": patch}}))
        assert "banlieue-provider-secret-access" in err, err
    # What does not move the credentials stays allowed (a label).
    writer.ok("label", "provider", "admins", "team=a")
    stored = json.loads(tenant.admin.ok("get", "provider", "-n", NS, "admins", "-o", "json"))
    assert stored["spec"]["connection"]["endpoint"] == "https://127.0.0.1:1/sdk"


def test_changing_the_classes_of_an_admin_provider_is_refused(tenant: Tenant) -> None:
    """New-user finding: a Provider writer repointed the network class of a Provider that uses
    the admin's credentials at another port group (what ``use-raw-placement`` guards on
    VSphereMachines), with those credentials."""
    tenant.admin.ok("apply", "--server-side", "-f", "-", docs=[_provider("admins-classes", "admin-creds")])
    writer = tenant.as_sa("writer")
    classes = {"networkClasses": [{"name": "default", "target": {"portGroup": "DC0_DVPG0"}}]}
    err = writer.rejected("patch", "provider", "admins-classes", "--type=merge", "-p", json.dumps({"spec": {"capabilities": classes}}))
    assert "banlieue-provider-capabilities-access" in err and "spec.capabilities" in err, err
    # On its own Provider (its own credentials): allowed.
    writer.ok("apply", "--server-side", "-f", "-", docs=[_provider("own-classes", "tenant-creds")])
    writer.ok("patch", "provider", "own-classes", "--type=merge", "-p", json.dumps({"spec": {"capabilities": classes}}))


def test_http_endpoints_are_refused_for_everyone(tenant: Tenant) -> None:
    err = tenant.admin.rejected("apply", "--server-side", "-f", "-", docs=[_provider("plain", "admin-creds", "HTTP://127.0.0.1:1/sdk")])
    assert "banlieue-provider-https-endpoint" in err and "clear text" in err, err


def test_user_data_from_a_secret_the_writer_cannot_read_is_refused(tenant: Tenant) -> None:
    writer = tenant.as_sa("writer")
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[_vm("copy", "admin-creds")])
    assert "banlieue-virtualmachine-userdata-access" in err, err
    writer.ok("apply", "--server-side", "-f", "-", docs=[_vm("mine", "tenant-creds")])


def test_raw_placement_needs_the_custom_verb(tenant: Tenant) -> None:
    writer = tenant.as_sa("writer")
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[_machine("raw", datastore="LocalDS_0")])
    assert "banlieue-vspheremachine-raw-placement" in err and RAW_PLACEMENT_VERB in err, err
    writer.ok("apply", "--server-side", "-f", "-", docs=[_machine("classed", storageClass="standard")])
    tenant.as_sa("placer").ok("apply", "--server-side", "-f", "-", docs=[_machine("raw", datastore="LocalDS_0")])
    template = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachineTemplate",
                "metadata": {"name": "t", "namespace": NS},
                "spec": {"template": {"spec": {"template": "ubuntu", "folder": "/dc0/vm/other-team"}}}}
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[template])
    assert "banlieue-vspheremachinetemplate-raw-placement" in err, err


def test_bootstrap_data_from_a_secret_the_writer_cannot_read_is_refused(tenant: Tenant) -> None:
    """Issue 23 case 3 through a VSphereMachine (found by the hostile-tenant pass): its
    ``bootstrapDataSecretRef`` is copied into guestinfo like a VirtualMachine's userData, so
    naming a Secret needs ``get`` on it - or the custom verb the controller role holds (it copies
    a VirtualMachine's userData, already checked) and CAPI holds (it copies templates)."""
    writer = tenant.as_sa("writer")
    stolen = _machine("boot", storageClass="standard")
    stolen["spec"]["bootstrapDataSecretRef"] = {"name": "admin-creds", "key": "password"}
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[stolen])
    assert "banlieue-vspheremachine-bootstrap-secret-access" in err and "bootstrapDataSecretRef" in err, err
    own = json.loads(json.dumps(stolen))
    own["spec"]["bootstrapDataSecretRef"]["name"] = "tenant-creds"
    writer.ok("apply", "--server-side", "-f", "-", docs=[own])
    # Moving an existing machine's reference to the admin's Secret: refused too.
    err = writer.rejected("patch", "vspheremachine", "boot", "--type=merge", "-p",
                          json.dumps({"spec": {"bootstrapDataSecretRef": {"name": "admin-creds", "key": "password"}}}))
    assert "banlieue-vspheremachine-bootstrap-secret-access" in err, err
    # The manager's ServiceAccount (the controller role) may: it copies a checked userData.
    manager = f"system:serviceaccount:{MANAGER_NAMESPACE}:{MANAGER_SERVICE_ACCOUNT}"
    tenant.admin.ok("apply", "--server-side", "--dry-run=server", "--as", manager, "-f", "-", docs=[
        {**stolen, "metadata": {"name": "copied", "namespace": NS}}])
    template = {"apiVersion": "infrastructure.banlieue.io/v1alpha1", "kind": "VSphereMachineTemplate",
                "metadata": {"name": "boot-t", "namespace": NS},
                "spec": {"template": {"spec": {"template": "ubuntu", "providerRef": {"name": "p"},
                                               "bootstrapDataSecretRef": {"name": "admin-creds", "key": "password"}}}}}
    err = writer.rejected("apply", "--server-side", "-f", "-", docs=[template])
    assert "banlieue-vspheremachinetemplate-bootstrap-secret-access" in err, err


def test_the_manager_may_not_list_or_watch_secrets(tenant: Tenant) -> None:
    """config/rbac: the manager's ServiceAccount gets referenced Secrets by name only."""
    k = tenant.admin
    sa = "system:serviceaccount:banlieue-system:banlieue-manager"
    for verb in ("list", "watch"):
        for resource in ("secrets", "configmaps"):
            proc = k.run("auth", "can-i", verb, resource, "--all-namespaces", "--as", sa)
            assert proc.stdout.strip() == "no", (verb, resource, proc.stdout, proc.stderr)
    assert k.run("auth", "can-i", "get", "secrets", "-n", NS, "--as", sa).stdout.strip() == "yes"
    docs = [d for d in yaml.safe_load_all((Path(__file__).resolve().parents[2] / "config/rbac/provider_vsphere.yaml").read_text()) if d]
    for doc in docs:
        for rule in doc.get("rules") or []:
            if set(rule["resources"]) & {"secrets", "configmaps"}:
                assert rule["verbs"] == ["get"], rule


def _get_metrics(port: int, token: str | None) -> tuple[int, str]:
    """GET https://127.0.0.1:<port>/metrics (certificate not verified: self-signed), bearer ``token``."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{port}/metrics",
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    try:
        with opener.open(req, timeout=15) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def test_secure_metrics_need_a_token_allowed_to_get_metrics(tenant: Tenant, tmp_path: Path) -> None:
    """Issue 23 case 7: with --metrics-secure the manager serves /metrics over HTTPS and asks the
    API server who is calling (TokenReview) and whether they may ``get`` ``/metrics``
    (SubjectAccessReview), with the manager's own ServiceAccount and config/rbac as installed:
    no token and a bad token get 401, the tenant's token 403, a ServiceAccount bound to
    ClusterRole banlieue-metrics-reader gets the metrics."""
    env = tenant.envtest
    tenant.admin.ok("apply", "--server-side", "-f", "-", docs=[
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "scraper", "namespace": NS}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "scraper-metrics"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER_ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": NS}]}])
    manager_token = env.token_for(MANAGER_NAMESPACE, MANAGER_SERVICE_ACCOUNT)
    kubeconfig = env.write_token_kubeconfig(tmp_path / "manager.kubeconfig", manager_token)
    client = Client(await load_config(str(kubeconfig)))
    mgr = Manager(client, metrics_bind_address="127.0.0.1:0", health_probe_bind_address="0",
                  metrics_secure=True, handle_signals=False)
    task = asyncio.create_task(mgr.start())
    try:
        while "metrics" not in mgr.health.bound_ports:
            assert not task.done(), task
            await asyncio.sleep(0.05)
        port = mgr.health.bound_ports["metrics"]
        get = functools.partial(asyncio.to_thread, _get_metrics, port)
        assert (await get(None))[0] == 401
        assert (await get("not-a-token"))[0] == 401
        assert (await get(env.token_for(NS, "writer")))[0] == 403
        status, body = await get(env.token_for(NS, "scraper"))
        assert status == 200 and "# TYPE " in body, (status, body[:200])
        assert mgr.health.metrics_auth is not None and mgr.health.metrics_auth.reviews >= 5
        # Plain HTTP on the secure port gets no metrics.
        with pytest.raises(OSError):
            urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


def test_vmimage_status_cannot_name_another_tenants_provider(tenant: Tenant) -> None:
    """Issue 23 case 8 on kube-apiserver: the cluster-scoped VMImage (readable by every tenant)
    has no place for per-Provider rows any more - a status naming a Provider and its error is
    pruned by the CRD's schema - while the row on a Provider of namespace ``other`` is out of the
    tenant's reach (RBAC)."""
    k = tenant.admin
    k.ok("create", "namespace", "other")
    k.ok("apply", "--server-side", "-f", "-", docs=[
        {"apiVersion": "banlieue.io/v1alpha1", "kind": "VMImage", "metadata": {"name": "tenant-safety-ubuntu"},
         "spec": {"sources": [{"providerClass": "vsphere", "kind": "Template", "ref": "ubuntu"}]}},
        {**_provider("secret-vc", "admin-creds"), "metadata": {"name": "secret-vc", "namespace": "other"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "vmimage-reader"},
         "rules": [{"apiGroups": ["banlieue.io"], "resources": ["vmimages"], "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "writer-vmimages"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "vmimage-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": NS}]}])
    leaky = {"perProvider": [{"providerName": "secret-vc", "providerNamespace": "other", "ready": False,
                              "message": "Secret other/admin-creds not found"}], "providers": 1, "readyProviders": 0}
    k.ok("patch", "vmimage", "tenant-safety-ubuntu", "--subresource=status", "--type=merge", "-p", json.dumps({"status": leaky}))
    k.ok("patch", "provider", "secret-vc", "-n", "other", "--subresource=status", "--type=merge", "-p",
         json.dumps({"status": {"images": [{"name": "tenant-safety-ubuntu", "ready": False, "reason": "ConnectFailed"}]}}))
    writer = tenant.as_sa("writer")
    deadline = time.monotonic() + 30
    while (proc := writer.run("get", "vmimage", "tenant-safety-ubuntu", "-o", "json")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)  # the binding takes effect a moment after it is created
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["status"] == {"providers": 1, "readyProviders": 0}, seen["status"]
    assert "other" not in proc.stdout and "secret-vc" not in proc.stdout and "admin-creds" not in proc.stdout
    refused = writer.run("get", "provider", "secret-vc", "-n", "other", "-o", "json")
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
    row = json.loads(k.ok("get", "provider", "secret-vc", "-n", "other", "-o", "json"))["status"]["images"]
    assert row == [{"name": "tenant-safety-ubuntu", "ready": False, "reason": "ConnectFailed"}]
