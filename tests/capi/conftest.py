"""Fixtures of the CAPI tier: ``capi_env`` (issue 7: the API double + the CAPI-core simulator, see
``capi.env``) and ``real_capi`` (issue 17: envtest's kube-apiserver + the real CAPI managers of
``make capi``, see ``capi.real``), each torn down after the test."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from banlieue.runtime.client import Client
from banlieue.runtime.config import Timeouts, config_for_url, load_config
from banlieue.runtime.kinds import NAMESPACE
from banlieue.testing import capi as capi_testing
from banlieue.testing.envtest import Envtest, envtest_binaries_missing, start_envtest
from banlieue.testing.vcsim import GUEST_IP_RANGES, VcsimProcess
from capi import crds
from capi.env import CapiEnv, VSphereOracle
from capi.real import RealCapi

REPO = Path(__file__).resolve().parents[2]
PROVIDERS = ("vcenter-a", "vcenter-b")


@pytest.fixture
async def capi_env(apiserver: Any, vcsim_factory: Callable[..., VcsimProcess], tmp_path: Path) -> AsyncIterator[CapiEnv]:
    """API double with banlieue's CRDs (config/crd) and the CAPI CRDs (over HTTP), two vcsims of
    1 datacenter x 3 clusters (guests get addresses), a namespace with two Providers (+ Secrets), ``banlieue manager``
    running as a subprocess against the double's kubeconfig."""
    apiserver.server.load_crd_dir(REPO / "config" / "crd")
    client = Client(config_for_url(apiserver.url), timeouts=Timeouts(connect=2.0, request=10.0, watch_margin=5.0))
    await crds.install(client)
    # guest_ip: the simulator plays DHCP and VMware Tools, so a powered-on guest reports an
    # address, as a real one does: a machine is provisioned only with one (issue 20).
    vcsims = {name: vcsim_factory(dc=1, cluster=3, host=1, guest_ip=GUEST_IP_RANGES[i]) for i, name in enumerate(PROVIDERS)}
    ns = f"capi-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    env = CapiEnv(client=client, namespace=ns, kubeconfig=apiserver.kubeconfig_path, vcsims=vcsims,
                  oracle=VSphereOracle(vcsims), log_path=tmp_path / "manager.log")
    try:
        await env.create_providers()
        await env.start_manager()
        yield env
    finally:
        await env.close()


# --- real Cluster API on the real API server (issue 17) ----------------------------------------


@pytest.fixture(scope="package")
def envtest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Envtest]:
    """This tier's own envtest (overrides the session's): CAPI's CRDs, webhook configurations and
    managers installed here stay out of the other tiers' API server. On the session's one, real
    CAPI's Cluster webhook outlived this tier and refused the integration tier's bare Clusters
    under ``BANLIEUE_TEST_APISERVER=real``."""
    reason = envtest_binaries_missing()
    if reason:
        pytest.skip(reason)
    with start_envtest(tmp_path_factory.mktemp("capi-envtest"), keep_logs=True) as env:
        yield env


@pytest.fixture(scope="package")
def capi_managers(envtest: Envtest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[capi_testing.CapiEnvironment]:
    """The real CAPI managers (``make capi``) on this tier's envtest kube-apiserver, each with
    its own ServiceAccount token and ``config/rbac``; banlieue's configuration installed first.
    Skipped when the binaries are missing; stopped when the tier ends."""
    missing = capi_testing.binaries_missing()
    if missing:
        pytest.skip(missing)
    capi_testing.install_banlieue(envtest.kubeconfig_path)
    env = capi_testing.CapiEnvironment(kubeconfig=envtest.kubeconfig_path, workdir=tmp_path_factory.mktemp("capi"))
    try:
        env.start()
        yield env
    finally:
        env.stop()


@pytest.fixture
async def real_capi(capi_managers: capi_testing.CapiEnvironment, envtest: Any, vcsim_factory: Callable[..., VcsimProcess],
                    tmp_path: Path) -> AsyncIterator[RealCapi]:
    """Per test: a namespace, two vcsims (1 datacenter x 3 clusters each), two Providers and
    ``banlieue manager`` as a subprocess running with the ``banlieue-manager`` ServiceAccount's
    token (config/rbac only), all on this tier's real API server driven by real CAPI.
    Teardown deletes the namespace's Clusters (while banlieue still runs, so VMs are destroyed)
    and the namespace."""
    client = Client(await load_config(str(envtest.kubeconfig_path)), timeouts=Timeouts(connect=2.0, request=15.0, watch_margin=5.0))
    # guest_ip: a machine is provisioned only once its guest reports a usable address (issue 20).
    vcsims = {name: vcsim_factory(dc=1, cluster=3, host=1, guest_ip=GUEST_IP_RANGES[i]) for i, name in enumerate(PROVIDERS)}
    ns = f"capi-{uuid.uuid4().hex[:6]}"
    await client.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    manager_kubeconfig = capi_testing.token_kubeconfig(envtest.kubeconfig_path, "banlieue-system", "banlieue-manager",
                                                       tmp_path / "banlieue-manager.kubeconfig")
    env = CapiEnv(client=client, namespace=ns, kubeconfig=manager_kubeconfig, vcsims=vcsims,
                  oracle=VSphereOracle(vcsims), log_path=tmp_path / "manager.log")
    real = RealCapi(env, capi_managers)
    try:
        await env.create_providers()
        await env.start_manager()
        yield real
    finally:
        with contextlib.suppress(Exception):
            await real.delete_clusters(timeout=60)
        await env.close()
        with contextlib.suppress(Exception):
            await client.delete(NAMESPACE, ns)
