"""ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) rendered to config/admission (SPEC §5).

Rules: Provider ``spec.providerClassRef`` and VirtualMachine ``spec.classRef`` / ``spec.imageRef``
are immutable; a Provider's ``spec.connection.caBundle``, when set, has exactly one of
``inline``, ``configMapRef``, ``secretRef``. The same rules are also CRD transition rules
(``x-kubernetes-validations``), so a cluster without the policies installed still enforces them;
the policies are the SPEC's enforcement point and can be audited or relaxed per binding
(``validationActions``) without a CRD change.

Tenant safety (issue 23, docs/security.md): whoever sets or changes a Provider's connection
(endpoint, credentialsRef, caBundle, insecureSkipTLSVerify) must be allowed to ``get`` the
Secret/ConfigMap it names (CEL ``authorizer``), as must whoever sets a VirtualMachine's
``userData.secretRef``, and whoever sets a VSphereMachine's (or VSphereMachineTemplate's)
``bootstrapDataSecretRef`` unless they hold the custom verb ``BOOTSTRAP_SECRET_VERB`` (the
controller role, which copies a VirtualMachine's already checked ``userData`` there, and CAPI,
which copies templates); ``http://`` endpoints are refused; the raw placement fields of
VSphereMachines and VSphereMachineTemplates need the custom verb ``use-raw-placement``
(``RAW_PLACEMENT_VERB``), which the controller role (it resolves classes into them) and CAPI
(it copies templates) hold.

VSphereMachineTemplate ``spec`` is immutable (CAPI InfraMachineTemplate contract; CAPV's webhook
refuses spec updates): a policy only, with no CRD transition rule behind it (a kube-apiserver
without the policies accepts the edit, which no machine follows).

Policies match only the main resource (not ``/status``), so status writes are never blocked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from banlieue.api import core, infrastructure
from banlieue.api.groups import VERSION
from banlieue.api.render import write_files

API_VERSION = "admissionregistration.k8s.io/v1"


@dataclass(frozen=True, slots=True)
class Validation:
    """One CEL validation: ``expression`` must be true, else ``message`` with ``reason`` (HTTP 422)."""

    expression: str
    message: str
    reason: str = "Invalid"


@dataclass(frozen=True, slots=True)
class Policy:
    """A ValidatingAdmissionPolicy over one resource of ``group``/``version`` for the given
    operations; ``match_conditions`` are (name, CEL expression) pairs that must all hold for the
    policy to apply (e.g. "the connection changed")."""

    name: str
    resource: str
    operations: tuple[str, ...]
    validations: tuple[Validation, ...]
    group: str = core.GROUP
    version: str = core.VERSION
    match_conditions: tuple[tuple[str, str], ...] = ()


CA_BUNDLE_ONE_OF = (
    "!has(object.spec.connection) || !has(object.spec.connection.caBundle) || "
    "[has(object.spec.connection.caBundle.inline), has(object.spec.connection.caBundle.configMapRef), "
    "has(object.spec.connection.caBundle.secretRef)].filter(x, x).size() == 1"
)

RAW_PLACEMENT_VERB = "use-raw-placement"
"""Custom RBAC verb on ``vspheremachines`` / ``vspheremachinetemplates`` (infrastructure.banlieue.io)
a requester needs to set the raw placement fields (docs/security.md). Kubernetes never checks a
custom verb itself: only these policies ask the authorizer for it."""


BOOTSTRAP_SECRET_VERB = "use-any-bootstrap-secret"
"""Custom RBAC verb on ``vspheremachines`` / ``vspheremachinetemplates`` (infrastructure.banlieue.io):
its holder may name in ``bootstrapDataSecretRef`` a Secret it cannot ``get`` itself (the
controller role copies a VirtualMachine's ``userData.secretRef``, checked when the VM was
written; CAPI copies templates). Anyone else needs ``get`` on that Secret: its content is copied
into the VM's guestinfo, readable in the guest (issue 23 case 3, the VSphereMachine path)."""


def _may_get(resource: str, name_expr: str) -> str:
    """CEL: the requester may ``get`` the core ``resource`` named ``name_expr`` in the object's namespace."""
    return f"authorizer.group('').resource('{resource}').namespace(object.metadata.namespace).name({name_expr}).check('get').allowed()"


def _raw_placement_set(spec: str) -> str:
    """CEL: any raw placement field is set in ``spec`` (a VSphereMachineSpec expression)."""
    return (
        f"has({spec}.resourcePool) || has({spec}.folder) || "
        f"(has({spec}.disks) && {spec}.disks.exists(d, has(d.datastore))) || "
        f"(has({spec}.network) && has({spec}.network.devices) && "
        f"{spec}.network.devices.exists(n, has(n.portGroup)))"
    )


def _raw_placement(spec: str, resource: str) -> Validation:
    check = (
        f"authorizer.group('{infrastructure.GROUP}').resource('{resource}')"
        f".namespace(object.metadata.namespace).check('{RAW_PLACEMENT_VERB}').allowed()"
    )
    return Validation(
        f"!({_raw_placement_set(spec)}) || {check}",
        f"raw placement fields (resourcePool, folder, disks[].datastore, network.devices[].portGroup) need the "
        f"'{RAW_PLACEMENT_VERB}' verb on {resource}.{infrastructure.GROUP}: use the Provider's storage and network classes",
        "Forbidden",
    )


def _bootstrap_secret_policy(resource: str, spec: str) -> Policy:
    """Setting or changing ``<spec>.bootstrapDataSecretRef`` needs ``get`` on that Secret or the
    ``BOOTSTRAP_SECRET_VERB`` on ``resource``."""
    ref = f"{spec}.bootstrapDataSecretRef"
    old = ref.replace("object.", "oldObject.", 1)
    verb = (f"authorizer.group('{infrastructure.GROUP}').resource('{resource}')"
            f".namespace(object.metadata.namespace).check('{BOOTSTRAP_SECRET_VERB}').allowed()")
    return Policy(
        name=f"banlieue-{resource.removesuffix('s')}-bootstrap-secret-access",
        resource=resource,
        group=infrastructure.GROUP,
        version=VERSION,
        operations=("CREATE", "UPDATE"),
        match_conditions=((
            "bootstrap-secret-changed",
            f"has({ref}) && (request.operation == 'CREATE' || !has({old}) || {ref} != {old})",
        ),),
        validations=(
            Validation(
                f"{_may_get('secrets', ref + '.name')} || {verb}",
                f"{ref.removeprefix('object.')}: you need permission to get that Secret (its content is copied into the VM)",
                "Forbidden",
            ),
        ),
    )


TEMPLATE_IMMUTABLE_MESSAGE = (
    "spec is immutable (Cluster API machine templates are never edited in place): create a new "
    "VSphereMachineTemplate with the change and point the MachineDeployment's "
    "spec.template.spec.infrastructureRef (or the KubeadmControlPlane's "
    "spec.machineTemplate.spec.infrastructureRef) at it; CAPI then replaces the machines"
)
"""The message of the ``banlieue-vspheremachinetemplate-immutable-spec`` policy."""

CONNECTION_CHANGED = (
    "request.operation == 'CREATE' || !has(oldObject.spec.connection) || object.spec.connection != oldObject.spec.connection"
)

POLICIES: tuple[Policy, ...] = (
    Policy(
        # Whoever points a Provider somewhere sends its credentials there: they must be able to
        # read them already (issue 23). Also on an endpoint or insecureSkipTLSVerify change.
        name="banlieue-provider-secret-access",
        resource="providers",
        operations=("CREATE", "UPDATE"),
        match_conditions=(("connection-changed", CONNECTION_CHANGED),),
        validations=(
            Validation(
                _may_get("secrets", "object.spec.connection.credentialsRef.name"),
                "setting or changing spec.connection needs permission to get the Secret named in spec.connection.credentialsRef",
                "Forbidden",
            ),
            Validation(
                "!has(object.spec.connection.caBundle) || !has(object.spec.connection.caBundle.secretRef) || "
                + _may_get("secrets", "object.spec.connection.caBundle.secretRef.name"),
                "setting or changing spec.connection needs permission to get the Secret named in spec.connection.caBundle.secretRef",
                "Forbidden",
            ),
            Validation(
                "!has(object.spec.connection.caBundle) || !has(object.spec.connection.caBundle.configMapRef) || "
                + _may_get("configmaps", "object.spec.connection.caBundle.configMapRef.name"),
                "setting or changing spec.connection needs permission to get the ConfigMap named in spec.connection.caBundle.configMapRef",
                "Forbidden",
            ),
        ),
    ),
    Policy(
        # A Provider's classes decide where VMs go (datastores, port groups) with its
        # credentials: changing them on a Provider whose credentials one cannot read would place
        # with someone else's rights (what use-raw-placement guards on VSphereMachines).
        name="banlieue-provider-capabilities-access",
        resource="providers",
        operations=("UPDATE",),
        match_conditions=((
            "capabilities-changed",
            "has(object.spec.capabilities) != has(oldObject.spec.capabilities) || "
            "(has(object.spec.capabilities) && object.spec.capabilities != oldObject.spec.capabilities)",
        ),),
        validations=(
            Validation(
                _may_get("secrets", "object.spec.connection.credentialsRef.name"),
                "changing spec.capabilities needs permission to get the Secret named in spec.connection.credentialsRef "
                "(the classes decide where VMs go with those credentials)",
                "Forbidden",
            ),
        ),
    ),
    Policy(
        # Credentials never cross the network in clear text. A development cluster against a
        # plain simulator deletes this binding and runs the manager with
        # --development-allow-http-endpoints (the controller refuses http:// too).
        name="banlieue-provider-https-endpoint",
        resource="providers",
        operations=("CREATE", "UPDATE"),
        validations=(
            Validation(
                "!object.spec.connection.endpoint.lowerAscii().trim().startsWith('http://')",
                "spec.connection.endpoint: http:// would send the credentials in clear text; use https://",
            ),
        ),
    ),
    Policy(
        name="banlieue-virtualmachine-userdata-access",
        resource="virtualmachines",
        operations=("CREATE", "UPDATE"),
        match_conditions=((
            "userdata-changed",
            "has(object.spec.userData) && (request.operation == 'CREATE' || !has(oldObject.spec.userData) || "
            "object.spec.userData != oldObject.spec.userData)",
        ),),
        validations=(
            Validation(
                _may_get("secrets", "object.spec.userData.secretRef.name"),
                "spec.userData.secretRef: you need permission to get that Secret (its content is copied into the VM)",
                "Forbidden",
            ),
        ),
    ),
    Policy(
        name="banlieue-vspheremachine-raw-placement",
        resource="vspheremachines",
        group=infrastructure.GROUP,
        version=VERSION,
        operations=("CREATE", "UPDATE"),
        match_conditions=((
            "placement-changed",
            "request.operation == 'CREATE' || object.spec != oldObject.spec",
        ),),
        validations=(_raw_placement("object.spec", "vspheremachines"),),
    ),
    Policy(
        name="banlieue-vspheremachinetemplate-raw-placement",
        resource="vspheremachinetemplates",
        group=infrastructure.GROUP,
        version=VERSION,
        operations=("CREATE", "UPDATE"),
        match_conditions=((
            "placement-changed",
            "request.operation == 'CREATE' || object.spec != oldObject.spec",
        ),),
        validations=(_raw_placement("object.spec.template.spec", "vspheremachinetemplates"),),
    ),
    _bootstrap_secret_policy("vspheremachines", "object.spec"),
    _bootstrap_secret_policy("vspheremachinetemplates", "object.spec.template.spec"),
    Policy(
        # CAPI contract: InfraMachineTemplates are immutable (CAPV refuses spec changes in its
        # webhook): the machines made from a template never follow an edit, and CAPI rolls them
        # out only when the MachineDeployment / control plane points at another template. The
        # whole spec is compared, so metadata edits, status writes (not matched) and CAPI's
        # server-side-apply dry runs of an unchanged template pass.
        name="banlieue-vspheremachinetemplate-immutable-spec",
        resource="vspheremachinetemplates",
        group=infrastructure.GROUP,
        version=VERSION,
        operations=("UPDATE",),
        validations=(
            Validation(
                "object.spec == oldObject.spec",
                TEMPLATE_IMMUTABLE_MESSAGE,
            ),
        ),
    ),
    Policy(
        name="banlieue-provider-immutable-class",
        resource="providers",
        operations=("UPDATE",),
        validations=(
            Validation(
                "object.spec.providerClassRef == oldObject.spec.providerClassRef",
                "spec.providerClassRef is immutable",
            ),
        ),
    ),
    Policy(
        name="banlieue-provider-ca-bundle",
        resource="providers",
        operations=("CREATE", "UPDATE"),
        validations=(
            Validation(
                CA_BUNDLE_ONE_OF,
                "spec.connection.caBundle: exactly one of inline, configMapRef or secretRef must be set",
            ),
        ),
    ),
    Policy(
        name="banlieue-virtualmachine-immutable-refs",
        resource="virtualmachines",
        operations=("UPDATE",),
        validations=(
            Validation("object.spec.classRef == oldObject.spec.classRef", "spec.classRef is immutable"),
            Validation("object.spec.imageRef == oldObject.spec.imageRef", "spec.imageRef is immutable"),
        ),
    ),
)


def _policy(p: Policy) -> dict[str, Any]:
    out: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": p.name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [p.group],
                        "apiVersions": [p.version],
                        "operations": list(p.operations),
                        "resources": [p.resource],
                    }
                ]
            },
            "validations": [
                {"expression": v.expression, "message": v.message, "reason": v.reason} for v in p.validations
            ],
        },
    }
    if p.match_conditions:
        out["spec"]["matchConditions"] = [{"name": n, "expression": e} for n, e in p.match_conditions]
    return out


def _binding(p: Policy) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": p.name},
        "spec": {"policyName": p.name, "validationActions": ["Deny"]},
    }


def render_admission() -> dict[str, list[dict[str, Any]]]:
    """Policy + binding documents by file name (``<policy name>.yaml``)."""
    return {f"{p.name.removeprefix('banlieue-')}.yaml": [_policy(p), _binding(p)] for p in POLICIES}


def write_admission(out: str) -> None:
    """Write the rendered policies and their ``Kustomization`` into directory ``out``."""
    write_files(out, render_admission(), "Generated by banlieue.api.admission.write_admission: do not edit.")
