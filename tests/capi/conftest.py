"""Fixture ``capi_env``: the issue-7 environment (see ``capi.env``), torn down after each test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from banlieue.runtime.client import Client
from banlieue.runtime.config import Timeouts, config_for_url
from banlieue.runtime.kinds import NAMESPACE
from banlieue.testing.vcsim import GUEST_IP_RANGES, VcsimProcess
from capi import crds
from capi.env import CapiEnv, VSphereOracle

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
