"""What a VSphereMachine's (and so its VirtualMachine's) conditions say about a failed vSphere call.

Whoever may read a VSphereMachine - a tenant of its namespace - must not learn through it what
vCenter or the network said: fault messages name ESXi hosts, datastores and inventory paths of
other tenants, exception texts carry addresses (issue 23, docs/security.md). So a condition
quotes a backend error only when the error says it is banlieue's own sentence built from the
request alone (``BackendError.public``: "template 'ubuntu' not found in 'DC0'", a disk shrink);
every other error gets a generic, actionable message for its reason, and the detail goes to the
manager's log (``vsphere action failed`` / ``vsphere lookup failed``, with the reconcile's
``reconcileID``, ``namespace`` and ``name``). The fault's type name (``reason``, e.g.
``InsufficientResourcesFault``) is a vSphere API class name, never instance data, and stays.

The Provider's own messages follow the same rule (``banlieue.reconcilers.provider.decide``).
"""

from __future__ import annotations

from typing import Literal

from banlieue.backends.base import (
    AuthFailed,
    BackendError,
    InvalidSpec,
    NotFound,
    TLSVerifyFailed,
    Transient,
    VCenterIdentityChanged,
)

Step = Literal["connect", "lookup", "create", "power", "destroy"]

LOG_HINT = "the manager's log has the detail"
UNREACHABLE = ("cannot reach the Provider's vCenter (no answer, refused, not a vCenter, or a TLS certificate that does "
               "not verify against the Provider's spec.connection.caBundle); retrying with back-off; " + LOG_HINT)
"""The one message for every "could not talk to vCenter" outcome, a certificate that does not
verify included, as the Provider's (what answered on the endpoint is not told)."""

_WHAT: dict[str, str] = {
    "connect": "connection", "lookup": "VM lookup", "create": "clone or reconfiguration",
    "power": "power change", "destroy": "deletion",
}
_UNREACHABLE_REASONS = frozenset({Transient.reason, "ConnectFailed", "Timeout", "RequestCanceled", "NotVimServer",
                                  "InvalidEndpoint", "EndpointNotAllowed"})
_OUTCOME_UNKNOWN = {
    "CloneOutcomeUnknown": "the clone was sent to vCenter and its outcome is not known yet; the VM is looked up by UID before any new clone",
    "PowerOutcomeUnknown": "the power change was sent to vCenter and its outcome is not known yet; the power state is read before it is sent again",
    "DestroyOutcomeUnknown": "the deletion was sent to vCenter and its outcome is not known yet; the VM is still there",
}


def condition_message(step: Step, err: BackendError) -> str:
    """The message a condition may carry for ``err`` raised by the ``step`` call: ``str(err)``
    when ``err.public``, else a generic sentence naming the step, the reason and what to do
    (module docstring). One line; never vCenter's text."""
    if err.public:
        return str(err)
    what = _WHAT[step]
    reason = err.reason
    if reason in _UNREACHABLE_REASONS or reason == TLSVerifyFailed.reason:
        return UNREACHABLE
    if reason in _OUTCOME_UNKNOWN:
        return _OUTCOME_UNKNOWN[reason]
    if reason == AuthFailed.reason:
        return ("the Provider's vCenter refused its credentials: fix the Secret named in the Provider's "
                "spec.connection.credentialsRef; " + LOG_HINT)
    if reason == "NoPermission":
        return (f"the Provider's vCenter account lacks a privilege the {what} needs: grant it in vCenter "
                "(the manager's log names the privilege)")
    if reason == VCenterIdentityChanged.reason:
        return ("the Provider's spec.connection.endpoint now reaches another vCenter than the one this machine's VM "
                "lives in: nothing was sent; point the endpoint back at that vCenter")
    if reason == "DuplicateName":
        # Built from what banlieue asked (the VM is named after the machine), not vCenter's text.
        return ("vCenter refused the clone: a VM of this machine's name already exists in the target folder and is not "
                "this machine's (DuplicateName); rename or remove that VM in vCenter (the clone is retried, at "
                "most a minute apart), or create the machine under another name")
    if reason in ("TaskTimeout",):
        return f"vCenter did not finish the {what} within --vsphere-task-timeout; retrying; {LOG_HINT}"
    if reason == InvalidSpec.reason:
        return f"vCenter refused the {what} as invalid (InvalidSpec): check the machine's spec; {LOG_HINT}"
    if reason == NotFound.reason or reason.endswith("NotFound"):
        return f"vCenter no longer has an object the {what} needs ({reason}); {LOG_HINT}"
    return f"vCenter failed the {what} ({reason}); {LOG_HINT}"
