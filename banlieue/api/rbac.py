"""RBAC of every banlieue role, declared as data and rendered to config/rbac (SPEC §4-§5).

Least privilege, no wildcards. Each role gets a ServiceAccount, a ClusterRole and a
ClusterRoleBinding in ``banlieue-system``; the default Deployment (``banlieue manager``, both roles
in one process, ServiceAccount ``banlieue-manager``) is bound to both ClusterRoles. A ClusterRole
labelled ``cluster.x-k8s.io/aggregate-to-manager: "true"`` grants CAPI core full read/write on
the infrastructure kinds (CAPI contract "All resources: API group": a provider outside
``cluster.x-k8s.io`` MUST grant it; with ClusterClass CAPI also creates and deletes templates).
The same role is also labelled ``kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager:
"true"``: KubeadmControlPlane clones InfraMachines from the InfraMachineTemplate, and its manager's
ClusterRole (CAPI ``controlplane/kubeadm/config/rbac``) aggregates only that label; its own rules
cover ``infrastructure.cluster.x-k8s.io`` alone. Without it real KCP (v1.14.2) was forbidden from
listing VSphereMachineTemplates and never created a Machine (tests/capi/test_real_capi.py).

Decisions: every grant is used by a code path of the role (audited against the API server's request
log by tests/chaos/test_security.py) or carries its reason next to it. The roles write with merge
patches and server-side apply only, so no ``update`` except the ``finalizers`` subresource below
and the Lease. Events are core/v1 only (banlieue.runtime.recorder says why), no events.k8s.io.
The controller role reads no Secret: user data is passed to the VSphereMachine by
reference and read by the provider. Lease rights: ``create`` cannot be narrowed by name (RBAC
has no name at create time), ``get``/``update`` are narrowed to the role's own Lease
(client-go leaselock uses only get, create and update).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from banlieue.api import core, infrastructure
from banlieue.api.admission import BOOTSTRAP_SECRET_VERB, RAW_PLACEMENT_VERB
from banlieue.api.render import write_files

NAMESPACE = "banlieue-system"
MANAGER_SERVICE_ACCOUNT = "banlieue-manager"
"""ServiceAccount of the default Deployment (config/manager), bound to every role."""
CAPI_AGGREGATE_ROLE = "banlieue-capi-aggregate"
CAPI_AGGREGATE_LABEL = "cluster.x-k8s.io/aggregate-to-manager"
KCP_AGGREGATE_LABEL = "kubeadm.controlplane.cluster.x-k8s.io/aggregate-to-manager"

READ = ("get", "list", "watch")
WRITE_OWN = ("get", "list", "watch", "patch")
"""Watched (informer list+watch, uncached ``get`` after a Conflict) and merge-patched (finalizers,
server-side apply): the roles never PUT an object (no ``update``)."""
OWN_STATUS = ("patch",)
"""The ``/status`` subresource is only written by server-side apply (PATCH); reads go to the object."""
CAPI_FULL = ("create", "delete", "get", "list", "patch", "update", "watch")
CAPI_STATUS = ("get", "patch", "update")
CORE = ""
COORD = "coordination.k8s.io"
CAPI = "cluster.x-k8s.io"
B = core.GROUP
INFRA = infrastructure.GROUP


@dataclass(frozen=True, slots=True)
class Rule:
    """One PolicyRule: API groups x resources x verbs, optionally narrowed to ``resource_names``."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    resource_names: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        """The rbac.authorization.k8s.io/v1 PolicyRule; verbs and resources sorted for stable output."""
        out: dict[str, Any] = {
            "apiGroups": list(self.api_groups),
            "resources": sorted(self.resources),
            "verbs": sorted(self.verbs),
        }
        if self.resource_names:
            out["resourceNames"] = sorted(self.resource_names)
        return out


@dataclass(frozen=True, slots=True)
class Role:
    """A process role (``banlieue controller``, ``banlieue provider vsphere``) and what it may do.

    ``name`` is the ClusterRole, ServiceAccount and ClusterRoleBinding name; ``lease`` the
    leader-election Lease (SPEC §4).
    """

    name: str
    lease: str
    rules: tuple[Rule, ...]

    def all_rules(self) -> tuple[Rule, ...]:
        """The role's rules plus events and its own leader-election Lease."""
        return (
            *self.rules,
            # Recorder: create, and patch of a repeated Event's count and lastTimestamp (core/v1).
            Rule((CORE,), ("events",), ("create", "patch")),
            Rule((COORD,), ("leases",), ("create",)),
            Rule((COORD,), ("leases",), ("get", "update"), (self.lease,)),
            # --metrics-secure (runtime.metrics_auth): who scrapes /metrics is asked of the API
            # server; every role may serve the metrics of its process.
            Rule(("authentication.k8s.io",), ("tokenreviews",), ("create",)),
            Rule(("authorization.k8s.io",), ("subjectaccessreviews",), ("create",)),
        )


CONTROLLER = Role(
    name="banlieue-controller",
    lease="banlieue-controller",
    rules=(
        # VirtualMachine: watched, finalizer by merge patch, status by server-side apply.
        Rule((B,), ("virtualmachines",), WRITE_OWN),
        Rule((B,), ("virtualmachines/status",), OWN_STATUS),
        # Not called directly: the VSphereMachine's controller ownerReference to its VirtualMachine
        # has blockOwnerDeletion, which OwnerReferencesPermissionEnforcement admission allows only
        # to a user that may update the owner's finalizers subresource.
        Rule((B,), ("virtualmachines/finalizers",), ("update",)),
        Rule((B,), ("providers", "vmclasses", "vmimages"), READ),
        # The controller creates (server-side apply), mirrors (apply) and deletes the
        # VSphereMachine behind each VM; owns() watches them.
        Rule((INFRA,), ("vspheremachines",), ("create", "delete", "get", "list", "patch", "watch")),
        # The VSphereMachines it writes carry the datastores/port groups its scheduler resolved
        # from the Provider's classes (banlieue-vspheremachine-raw-placement) and the
        # VirtualMachine's userData Secret, whose writer admission already checked
        # (banlieue-vspheremachine-bootstrap-secret-access; this role reads no Secret): the
        # policies ask the authorizer for these custom verbs; no request uses them as verbs.
        Rule((INFRA,), ("vspheremachines",), (RAW_PLACEMENT_VERB, BOOTSTRAP_SECRET_VERB)),
        # VSphereCluster: watched; only its status is written (apply).
        Rule((INFRA,), ("vsphereclusters",), READ),
        Rule((INFRA,), ("vsphereclusters/status",), OWN_STATUS),
        # InfraCluster pausing: Cluster.spec.paused (CAPI contract); get of the owner Cluster.
        Rule((CAPI,), ("clusters",), READ),
    ),
)

PROVIDER_VSPHERE = Role(
    name="banlieue-provider-vsphere",
    lease="banlieue-provider-vsphere",
    rules=(
        # Provider: watched, its deletion finalizer added/removed by merge patch.
        Rule((B,), ("providers",), WRITE_OWN),
        Rule((B,), ("vmimages",), READ),
        Rule((B,), ("providers/status", "vmimages/status"), OWN_STATUS),
        # VSphereMachine: finalizer (merge patch) and spec.providerID (apply); status by apply.
        Rule((INFRA,), ("vspheremachines",), WRITE_OWN),
        Rule((INFRA,), ("vspheremachinetemplates",), READ),
        Rule((INFRA,), ("vspheremachines/status", "vspheremachinetemplates/status"), OWN_STATUS),
        # Credentials and CA bundles of Providers; bootstrap data Secrets of VSphereMachines.
        # ``get`` only: the referenced names are read directly (reconcilers.referenced), never
        # listed or watched, so no Secret the manager does not need is ever in its memory
        # (issue 23, docs/security.md). RBAC cannot narrow ``get`` to names chosen by tenants.
        Rule((CORE,), ("secrets", "configmaps"), ("get",)),
        # CAPI path: Machine owner and Cluster (paused, failure domains), informers only once
        # discovery shows CAPI's CRDs.
        Rule((CAPI,), ("clusters", "machines"), READ),
    ),
)

ROLES: tuple[Role, ...] = (CONTROLLER, PROVIDER_VSPHERE)

CAPI_AGGREGATE_RULES: tuple[Rule, ...] = (
    Rule((INFRA,), ("vspheremachines", "vsphereclusters", "vspheremachinetemplates", "vsphereclustertemplates"), CAPI_FULL),
    Rule((INFRA,), ("vspheremachines/status", "vsphereclusters/status", "vspheremachinetemplates/status"), CAPI_STATUS),
    # CAPI copies a VSphereMachineTemplate's spec (raw placement fields and a
    # bootstrapDataSecretRef included) into the VSphereMachines it creates; whoever wrote the
    # template was checked by the same policies.
    Rule((INFRA,), ("vspheremachines",), (RAW_PLACEMENT_VERB, BOOTSTRAP_SECRET_VERB)),
)


METRICS_READER_ROLE = "banlieue-metrics-reader"
"""ClusterRole allowing ``get`` on ``/metrics`` of a manager run with ``--metrics-secure``."""


def _service_account(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}}


def _cluster_role(name: str, rules: tuple[Rule, ...], labels: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata,
        "rules": [r.to_wire() for r in rules],
    }


def _binding(name: str, role: str, service_account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE}],
    }


def render_rbac() -> dict[str, list[dict[str, Any]]]:
    """The RBAC objects by file name (``<role>.yaml``, ``manager.yaml``, ``metrics_reader.yaml``,
    ``capi_aggregate.yaml``)."""
    files: dict[str, list[dict[str, Any]]] = {}
    for role in ROLES:
        files[f"{role.name.removeprefix('banlieue-').replace('-', '_')}.yaml"] = [
            _service_account(role.name),
            _cluster_role(role.name, role.all_rules()),
            _binding(role.name, role.name, role.name),
        ]
    files["manager.yaml"] = [_service_account(MANAGER_SERVICE_ACCOUNT)] + [
        _binding(f"{MANAGER_SERVICE_ACCOUNT}-{role.name.removeprefix('banlieue-')}", role.name, MANAGER_SERVICE_ACCOUNT)
        for role in ROLES
    ]
    files["metrics_reader.yaml"] = [{
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": METRICS_READER_ROLE},
        # Bind it to Prometheus's ServiceAccount to scrape a manager run with --metrics-secure.
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }]
    files["capi_aggregate.yaml"] = [
        _cluster_role(CAPI_AGGREGATE_ROLE, CAPI_AGGREGATE_RULES, {CAPI_AGGREGATE_LABEL: "true", KCP_AGGREGATE_LABEL: "true"})
    ]
    return files


def write_rbac(out: str) -> None:
    """Write the rendered RBAC files and their ``Kustomization`` into directory ``out``."""
    write_files(out, render_rbac(), "Generated by banlieue.api.rbac.write_rbac: do not edit.")


# --- per-namespace mode (``banlieue manager --namespace NS``, config/namespaced) ---------------

NAMESPACED_PLACEHOLDER = "banlieue-tenant"
"""Namespace the per-namespace RBAC is rendered in; config/namespaced's ``namespace:`` (and
``nameSuffix``) move every object to the namespace the manager watches."""
NAMESPACED_ROLE = "banlieue-manager"
"""Role, RoleBinding and ServiceAccount of the per-namespace manager (in the watched namespace)."""
NAMESPACED_CLUSTER_ROLE = "banlieue-namespaced-manager"
"""ClusterRole (and its ClusterRoleBinding) of what a per-namespace manager still needs cluster-wide."""
CLUSTER_SCOPED_GROUPS = {
    B: {"vmclasses", "vmimages"},
    "authentication.k8s.io": {"tokenreviews"},
    "authorization.k8s.io": {"subjectaccessreviews"},
}
"""The cluster-scoped resources the roles name; everything else they name is namespaced."""
NAMESPACED_MODE_DROPPED = {(B, "vmimages/status")}
"""Not needed with ``--namespace``: the VMImage's cluster-wide counts are written only by a
manager that sees every namespace's Providers (the VMImage controller skips them, and its
Events, which for a cluster-scoped object would go to namespace ``default``)."""


def _is_cluster_scoped(group: str, resource: str) -> bool:
    return resource.split("/")[0] in CLUSTER_SCOPED_GROUPS.get(group, set())


def namespaced_rules() -> tuple[tuple[Rule, ...], tuple[Rule, ...]]:
    """Both roles' rules merged and split for the per-namespace mode: ``(namespaced, cluster_scoped)``.

    Every (group, resource, resourceNames) of ``ROLES`` (``Role.all_rules``) keeps the union of
    the verbs the two roles grant it; resources with the same group, resourceNames and verbs
    share one rule. Each goes to the Role in the watched namespace, except the cluster-scoped
    ones (``CLUSTER_SCOPED_GROUPS``: VMClass and VMImage reads, which every namespace's VMs
    resolve, and the TokenReview / SubjectAccessReview creation of ``--metrics-secure``), and
    except ``NAMESPACED_MODE_DROPPED``. Sorted by group, then resources, for a stable output."""
    verbs: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for role in ROLES:
        for rule in role.all_rules():
            for group in rule.api_groups:
                for resource in rule.resources:
                    if (group, resource) not in NAMESPACED_MODE_DROPPED:
                        verbs.setdefault((group, resource, tuple(sorted(rule.resource_names))), set()).update(rule.verbs)
    grouped: dict[tuple[bool, str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for (group, resource, names), verb_set in verbs.items():
        key = (_is_cluster_scoped(group, resource), group, names, tuple(sorted(verb_set)))
        grouped.setdefault(key, []).append(resource)
    out: dict[bool, list[Rule]] = {True: [], False: []}
    for (cluster, group, names, sorted_verbs), resources in sorted(grouped.items(), key=lambda kv: (kv[0][1], sorted(kv[1]), kv[0][2])):
        out[cluster].append(Rule((group,), tuple(sorted(resources)), sorted_verbs, names))
    return tuple(out[False]), tuple(out[True])


def render_namespaced_rbac() -> dict[str, list[dict[str, Any]]]:
    """The per-namespace mode's RBAC by file name: ``role.yaml`` (ServiceAccount, Role and
    RoleBinding ``banlieue-manager`` in :data:`NAMESPACED_PLACEHOLDER`) and ``cluster_role.yaml``
    (ClusterRole and ClusterRoleBinding ``banlieue-namespaced-manager``: cluster-scoped reads)."""
    namespaced, cluster = namespaced_rules()
    ns = NAMESPACED_PLACEHOLDER
    subject = [{"kind": "ServiceAccount", "name": NAMESPACED_ROLE, "namespace": ns}]
    return {
        "role.yaml": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAMESPACED_ROLE, "namespace": ns}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": NAMESPACED_ROLE, "namespace": ns}, "rules": [r.to_wire() for r in namespaced]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": NAMESPACED_ROLE, "namespace": ns},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAMESPACED_ROLE},
             "subjects": subject},
        ],
        "cluster_role.yaml": [
            _cluster_role(NAMESPACED_CLUSTER_ROLE, cluster),
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": NAMESPACED_CLUSTER_ROLE},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAMESPACED_CLUSTER_ROLE},
             "subjects": subject},
        ],
    }


def write_namespaced_rbac(out: str) -> None:
    """Write :func:`render_namespaced_rbac`'s files and their ``Kustomization`` into ``out``."""
    write_files(out, render_namespaced_rbac(), "Generated by banlieue.api.rbac.write_namespaced_rbac: do not edit.")
