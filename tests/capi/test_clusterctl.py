"""Issue 17 item 4: clusterctl (``bin/clusterctl``, Cluster API v1.14.2) reads banlieue's release
as a local repository (``REPO_DIR=… hack/release.sh``; ``banlieue.testing.clusterctl``), and what
``clusterctl generate cluster`` prints for each flavour is what these tests apply to real CAPI
(the ``real_capi`` fixture: envtest's kube-apiserver, the three CAPI managers, two vcsims,
``banlieue manager``), where it provisions; ``clusterctl describe cluster`` then shows banlieue's
objects with their conditions.

``clusterctl init`` is not run: it installs cert-manager and the providers as Pods, and nothing
runs Pods here (no kubelet); the fixture installs the same components as processes instead.

Every control-plane endpoint given to ``clusterctl generate`` is a 127.17.0.x address: the
generated documents go through ``check_loopback`` before ``kubectl apply``.
"""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from banlieue.reconcilers.kinds import CAPI_CLUSTER, CAPI_MACHINE, VSPHERE_MACHINE
from banlieue.testing import clusterctl
from banlieue.testing.capi import CapiUnavailable, NetworkRuleViolation, binary, check_loopback, kubectl
from capi.env import eventually
from capi.real import LABEL_CLUSTER_NAME, LABEL_CONTROL_PLANE, RealCapi, bootstrap_secret
from capi.simulator import condition

KUBERNETES_VERSION = "v1.34.4"
NAME = "cc"
DATA_SECRET = "cc-bootstrap"
USER_DATA = "#cloud-config\nhostname: from-clusterctl-flavor\n"
PROVISION_TIMEOUT = 120.0  # seconds for CAPI + banlieue to provision a batch of Machines on a loaded 2-core machine
FLAVOR_REQUIRED = {
    "": {"CONTROL_PLANE_ENDPOINT_IP", "KUBERNETES_VERSION"},
    "bootstrap-secret": {"BOOTSTRAP_DATA_SECRET_NAME", "CONTROL_PLANE_ENDPOINT_IP", "KUBERNETES_VERSION"},
    "topology": {"CONTROL_PLANE_ENDPOINT_IP", "KUBERNETES_VERSION"},
}
# Machines small enough for a vcsim host (and a template-sized disk): the flavours' defaults are
# for real clusters.
SMALL = {"BANLIEUE_CONTROL_PLANE_CPUS": "1", "BANLIEUE_CONTROL_PLANE_MEMORY_MIB": "512", "BANLIEUE_CONTROL_PLANE_DISK_GIB": "10",
         "BANLIEUE_WORKER_CPUS": "1", "BANLIEUE_WORKER_MEMORY_MIB": "512", "BANLIEUE_WORKER_DISK_GIB": "10"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> clusterctl.Repository:
    """The release as a clusterctl local repository (``hack/release.sh`` with ``REPO_DIR``)."""
    try:
        binary("clusterctl")
    except CapiUnavailable as e:
        pytest.skip(str(e))
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl (with built-in kustomize) is needed by hack/release.sh")
    return clusterctl.write_repository(tmp_path_factory.mktemp("clusterctl") / "repo")


def test_release_is_laid_out_as_a_clusterctl_local_repository(repo: clusterctl.Repository) -> None:
    assert repo.version == "v0.1.0"
    files = sorted(p.name for p in repo.release_dir.iterdir())
    assert files == ["cluster-template-bootstrap-secret.yaml", "cluster-template-topology.yaml", "cluster-template.yaml",
                     "clusterclass-banlieue.yaml", "infrastructure-components.yaml", "metadata.yaml"]
    assert repo.flavors() == sorted(FLAVOR_REQUIRED)
    [config] = clusterctl.documents(repo.config.read_text())
    [provider] = config["providers"]
    assert provider == {"name": "banlieue", "type": "InfrastructureProvider",
                        "url": f"file://{repo.release_dir}/infrastructure-components.yaml"}
    assert config["CLUSTERCTL_DISABLE_VERSIONCHECK"] == "true"


def test_generate_provider_prints_the_components_with_variables_substituted(repo: clusterctl.Repository) -> None:
    """``clusterctl generate provider`` reads the repository's components and metadata (contract
    v1beta2) and substitutes the components' variables (BANLIEUE_LOG_LEVEL given, the other left
    to its default); every object carries the provider label."""
    out = clusterctl.run(repo, "generate", "provider", "--infrastructure", f"banlieue:{repo.version}",
                         variables={"BANLIEUE_LOG_LEVEL": "debug"})
    assert "${" not in out
    docs = clusterctl.documents(out)
    release = clusterctl.documents((repo.release_dir / "infrastructure-components.yaml").read_text())
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == sorted((d["kind"], d["metadata"]["name"]) for d in release)
    assert len([d for d in docs if d["kind"] == "CustomResourceDefinition"]) == 8
    for doc in docs:
        assert doc["metadata"]["labels"]["cluster.x-k8s.io/provider"] == clusterctl.PROVIDER_LABEL, doc["metadata"]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "docker.io/library/banlieue:v0.1.0"  # canonical, as clusterctl requires
    assert {"--log-level=debug", "--max-concurrent-reconciles=32"} <= set(container["args"])
    described = clusterctl.run(repo, "generate", "provider", "--infrastructure", f"banlieue:{repo.version}", "--describe")
    assert "infrastructure-banlieue" in described and repo.version in described, described


@pytest.mark.parametrize("flavor", sorted(FLAVOR_REQUIRED))
def test_generate_cluster_lists_each_flavors_variables(repo: clusterctl.Repository, flavor: str) -> None:
    args = clusterctl.generate_cluster_args(NAME, flavor=flavor, namespace="ns", version=repo.version)
    required, optional = clusterctl.parse_variables(clusterctl.run(repo, *args, "--list-variables"))
    assert required == FLAVOR_REQUIRED[flavor]
    assert optional["CONTROL_PLANE_ENDPOINT_PORT"] == "6443"
    if flavor != "topology":  # the ClusterClass's variables are not listed (clusterctl lists the Cluster template's)
        assert optional["BANLIEUE_TEMPLATE"] == "ubuntu-22.04"
        assert {"BANLIEUE_WORKER_MEMORY_MIB", "BANLIEUE_STORAGE_CLASS", "BANLIEUE_NETWORK_CLASS"} <= optional.keys()


def test_generate_cluster_refuses_a_missing_required_variable(repo: clusterctl.Repository) -> None:
    args = clusterctl.generate_cluster_args(NAME, namespace="ns", kubernetes_version=KUBERNETES_VERSION, version=repo.version)
    with pytest.raises(clusterctl.ClusterctlError, match="CONTROL_PLANE_ENDPOINT_IP"):
        clusterctl.run(repo, *args)


@pytest.mark.parametrize("flavor", sorted(FLAVOR_REQUIRED))
def test_a_generated_cluster_off_loopback_is_refused_before_it_reaches_capi(repo: clusterctl.Repository, flavor: str) -> None:
    args = clusterctl.generate_cluster_args(NAME, flavor=flavor, namespace="ns", kubernetes_version=KUBERNETES_VERSION, version=repo.version)
    docs = clusterctl.documents(clusterctl.run(repo, *args, variables={"CONTROL_PLANE_ENDPOINT_IP": "10.0.0.100",
                                                                       "BOOTSTRAP_DATA_SECRET_NAME": "s"}))
    where = "Cluster/cc: spec.topology.variables[controlPlaneEndpointHost]" if flavor == "topology" else \
        "VSphereCluster/cc: spec.controlPlaneEndpoint.host"
    with pytest.raises(NetworkRuleViolation, match=re.escape(f"{where} '10.0.0.100' is not on loopback")):
        check_loopback(docs)


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (hack/install-deps.sh installs it)")
def test_clusterctl_dials_nothing(repo: clusterctl.Repository, tmp_path: Path) -> None:
    """Network rule: with the repository's configuration, clusterctl opens no network connection
    at all when it generates (its version check would ask GitHub)."""
    trace = tmp_path / "connect.trace"
    args = clusterctl.generate_cluster_args(NAME, namespace="ns", kubernetes_version=KUBERNETES_VERSION, version=repo.version)
    clusterctl.run(repo, *args, variables={"CONTROL_PLANE_ENDPOINT_IP": "127.17.0.20"},
                   wrap=["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace)])
    inet = [line for line in trace.read_text().splitlines() if "AF_INET" in line]
    assert inet == [], inet


# --- generated clusters on real CAPI ------------------------------------------------------------


async def apply_generated(r: RealCapi, repo: clusterctl.Repository, flavor: str, endpoint: str, *, control_plane: int, workers: int,
                          extra: dict[str, str]) -> list[dict[str, Any]]:
    """``clusterctl generate cluster`` against the envtest API server (target namespace: the
    test's), network rule check, ``kubectl apply -f -`` of exactly what it printed."""
    kubeconfig = r.managers.kubeconfig
    args = clusterctl.generate_cluster_args(NAME, flavor=flavor, namespace=r.env.namespace, kubernetes_version=KUBERNETES_VERSION,
                                            control_plane_machines=control_plane, worker_machines=workers, version=repo.version)
    text = clusterctl.run(repo, *args, kubeconfig=kubeconfig, variables={"CONTROL_PLANE_ENDPOINT_IP": endpoint, **SMALL, **extra})
    docs = clusterctl.documents(text)
    check_loopback(docs)
    kubectl(kubeconfig, "apply", "-f", "-", stdin=text)
    return docs


async def wait_provisioned(r: RealCapi, count: int, *, control_plane: bool | None = None) -> list[dict[str, Any]]:
    """``count`` Machines of the Cluster (only control-plane ones when ``control_plane``, only
    workers when False) with the providerID CAPI copied from their VSphereMachine."""
    async def check() -> list[dict[str, Any]] | None:
        ms = await r.list(CAPI_MACHINE, {LABEL_CLUSTER_NAME: NAME})
        if control_plane is not None:
            ms = [m for m in ms if (LABEL_CONTROL_PLANE in m["metadata"].get("labels", {})) == control_plane]
        return ms if len(ms) == count and all(m["spec"].get("providerID") for m in ms) else None
    try:
        return await eventually(check, timeout=PROVISION_TIMEOUT, what=f"{count} Machines with providerID", interval=1.0)
    except AssertionError as e:
        vsms = {o["metadata"]["name"]: condition(o, "Ready") for o in await r.list(VSPHERE_MACHINE)}
        raise AssertionError(f"{e}\nVSphereMachines: {vsms}\n{r.logs()}") from None


async def wait_cluster(r: RealCapi) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        c = await r.get(CAPI_CLUSTER, NAME)
        return c if ((c.get("status") or {}).get("initialization") or {}).get("infrastructureProvisioned") is True else None
    return await eventually(check, timeout=60, what="Cluster infrastructureProvisioned", interval=0.5)


def describe(r: RealCapi, repo: clusterctl.Repository) -> str:
    """``clusterctl describe cluster NAME`` with every object's conditions and every Machine."""
    return clusterctl.run(repo, "describe", "cluster", NAME, "--namespace", r.env.namespace, "--show-conditions", "all",
                          "--grouping=false", kubeconfig=r.managers.kubeconfig)


@pytest.mark.vcsim
@pytest.mark.timeout(420)
async def test_bootstrap_secret_flavor_from_clusterctl_is_provisioned_by_real_capi(real_capi: RealCapi,
                                                                                  repo: clusterctl.Repository) -> None:
    """The ``bootstrap-secret`` flavour as clusterctl prints it: the Cluster is provisioned from
    the VSphereCluster over every Provider of the namespace (6 failure domains), three worker
    Machines are placed by banlieue (no failure domain in the flavour), each VM in the chosen
    domain's vCenter/datacenter/cluster with the pre-created Secret as user data, and ``clusterctl
    describe`` shows the Cluster, VSphereCluster and every Machine Ready with its VSphereMachine's
    conditions."""
    r, env = real_capi, real_capi.env
    ns = env.namespace
    await env.wait_providers_ready()
    await r.create(bootstrap_secret(DATA_SECRET, ns, NAME, USER_DATA))
    docs = await apply_generated(r, repo, "bootstrap-secret", "127.17.0.21", control_plane=1, workers=3,
                                 extra={"BOOTSTRAP_DATA_SECRET_NAME": DATA_SECRET})
    assert sorted(d["kind"] for d in docs) == ["Cluster", "MachineDeployment", "VSphereCluster", "VSphereMachineTemplate"]
    c = await wait_cluster(r)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.21", "port": 6443}
    domains = {fd["name"]: fd for fd in c["status"].get("failureDomains") or []}
    assert len(domains) == 6, domains

    machines = await wait_provisioned(r, 3)
    chosen = set()
    for m in machines:
        vsm = await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"])
        fd = vsm["status"]["failureDomain"]
        chosen.add(fd)
        [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
        attrs = domains[fd]["attributes"]
        assert (loc.vcenter, loc.datacenter, loc.cluster) == (attrs["provider"], attrs["datacenter"], attrs["cluster"])
        assert loc.power_state == "poweredOn"
        assert base64.b64decode(loc.extra_config["guestinfo.userdata"]).decode() == USER_DATA
    assert len(chosen) == 3, chosen  # spread by banlieue's scheduler

    # describe: banlieue's VSphereCluster with its own conditions; each Machine's InfrastructureReady
    # is its VSphereMachine's Ready (reason and message banlieue's), as CAPI mirrors it.
    vms = {m["metadata"]["name"]: await r.get(VSPHERE_MACHINE, m["spec"]["infrastructureRef"]["name"]) for m in machines}

    async def described() -> dict[tuple[str, str], dict[str, clusterctl.Condition]] | None:
        tree = clusterctl.parse_describe(describe(r, repo))
        ok = all(tree.get(("Machine", n), {}).get("InfrastructureReady") == clusterctl.Condition(
            "True", "Provisioned", f"VM {vsm['metadata']['name']} is PoweredOn at {vsm['status']['addresses'][0]['address']}")
            for n, vsm in vms.items())
        return tree if ok else None
    tree = await eventually(described, timeout=60, what="clusterctl describe: every Machine's InfrastructureReady from banlieue", interval=2.0)
    vsc = tree[("VSphereCluster", NAME)]
    assert vsc["Ready"] == clusterctl.Condition("True", "Ready", "6 failure domains from 2 Providers"), vsc
    assert vsc["Paused"].status == "False"
    assert tree[("Cluster", NAME)]["InfrastructureReady"] == vsc["Ready"]
    assert ("MachineDeployment", f"{NAME}-md-0") in tree
    for name in vms:
        assert tree[("Machine", name)]["BootstrapConfigReady"] == clusterctl.Condition("True", "DataSecretProvided", "")


@pytest.mark.vcsim
@pytest.mark.timeout(420)
async def test_default_flavor_from_clusterctl_gets_its_first_control_plane_machine(real_capi: RealCapi,
                                                                                  repo: clusterctl.Repository) -> None:
    """The default flavour (KubeadmControlPlane + kubeadm MachineDeployment) as clusterctl prints
    it, with the machine sizes given as variables: real KCP's first Machine is provisioned by
    banlieue with the variables' size and CABPK's ``kubeadm init`` for the 127.17.0.22 endpoint
    in guestinfo; the worker waits for join data (nobody serves the workload API server), as
    ``clusterctl describe`` shows."""
    r, env = real_capi, real_capi.env
    await env.wait_providers_ready()
    docs = await apply_generated(r, repo, "", "127.17.0.22", control_plane=1, workers=1, extra={})
    [kcp] = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
    assert kcp["spec"]["replicas"] == 1 and kcp["spec"]["version"] == KUBERNETES_VERSION
    await wait_cluster(r)
    [machine] = await wait_provisioned(r, 1, control_plane=True)
    vsm = await r.get(VSPHERE_MACHINE, machine["spec"]["infrastructureRef"]["name"])
    assert vsm["spec"]["memoryMiB"] == 512 and vsm["spec"]["numCPUs"] == 1  # SMALL, through clusterctl's substitution
    assert vsm["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == f"{NAME}-control-plane"
    [loc] = await env.locate(vsm["spec"]["providerID"].removeprefix("vsphere://"))
    user_data = base64.b64decode(loc.extra_config["guestinfo.userdata"]).decode()
    assert "kubeadm init" in user_data and "controlPlaneEndpoint: 127.17.0.22:6443" in user_data

    async def worker_waiting() -> dict[str, Any] | None:
        for w in await r.list(VSPHERE_MACHINE):
            if (condition(w, "Ready") or {}).get("reason") == "WaitingForBootstrapData":
                return w
        return None
    wvsm = await eventually(worker_waiting, timeout=60, what="the worker's VSphereMachine WaitingForBootstrapData", interval=1.0)
    assert await env.find_vms(uid=wvsm["metadata"]["uid"]) == []
    text = describe(r, repo)
    tree = clusterctl.parse_describe(text)
    assert ("KubeadmControlPlane", f"{NAME}-control-plane") in tree, text
    assert tree[("VSphereCluster", NAME)]["Ready"].status == "True", text
    assert tree[("Machine", machine["metadata"]["name"])]["InfrastructureReady"].reason == "Provisioned", text
    [worker] = [m for m in await r.list(CAPI_MACHINE, {LABEL_CLUSTER_NAME: NAME}) if LABEL_CONTROL_PLANE not in m["metadata"]["labels"]]
    assert tree[("Machine", worker["metadata"]["name"])]["BootstrapConfigReady"].status == "False", text


@pytest.mark.vcsim
@pytest.mark.timeout(420)
async def test_topology_flavor_from_clusterctl_brings_the_cluster_class_and_provisions(real_capi: RealCapi,
                                                                                     repo: clusterctl.Repository) -> None:
    """The ``topology`` flavour: clusterctl adds the repository's ClusterClass ``banlieue`` (and its
    templates) to what it prints; CAPI's topology controller patches the Cluster's endpoint
    variable into the VSphereCluster it creates (so the Cluster gets 127.17.0.23:6443), reconciles
    the topology without an admission rejection, and banlieue provisions the first control-plane
    Machine."""
    r, env = real_capi, real_capi.env
    await env.wait_providers_ready()
    docs = await apply_generated(r, repo, "topology", "127.17.0.23", control_plane=1, workers=1, extra={})
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Cluster", "ClusterClass", "KubeadmConfigTemplate", "KubeadmControlPlaneTemplate", "VSphereClusterTemplate",
                     "VSphereMachineTemplate", "VSphereMachineTemplate"], kinds
    c = await wait_cluster(r)
    assert c["spec"]["controlPlaneEndpoint"] == {"host": "127.17.0.23", "port": 6443}
    vsc = c["spec"]["infrastructureRef"]["name"]

    async def reconciled() -> dict[str, Any] | None:
        cond = condition(await r.get(CAPI_CLUSTER, NAME), "TopologyReconciled") or {}
        return cond if cond.get("status") == "True" else None
    try:
        await eventually(reconciled, timeout=60, what="Cluster TopologyReconciled True", interval=1.0)
    except AssertionError:
        raise AssertionError(f"{condition(await r.get(CAPI_CLUSTER, NAME), 'TopologyReconciled')}\n{r.logs()}") from None
    [machine] = await wait_provisioned(r, 1, control_plane=True)
    vsm = await r.get(VSPHERE_MACHINE, machine["spec"]["infrastructureRef"]["name"])
    assert vsm["spec"]["memoryMiB"] == 512 and vsm["status"]["failureDomain"] == machine["spec"]["failureDomain"]
    tree = clusterctl.parse_describe(describe(r, repo))
    assert tree[("VSphereCluster", vsc)]["Ready"] == clusterctl.Condition("True", "Ready", "6 failure domains from 2 Providers"), tree
    assert tree[("Cluster", NAME)]["TopologyReconciled"].status == "True"
