"""Map pyvmomi / socket / TLS exceptions onto the backend error taxonomy (banlieue.backends.base)."""

from __future__ import annotations

import http.client
import socket
import ssl
from typing import Any

from pyVmomi import vim as _vim
from pyVmomi import vmodl as _vmodl

from banlieue.backends.base import (
    AuthFailed,
    BackendError,
    InvalidSpec,
    NotFound,
    TaskFailed,
    TLSVerifyFailed,
    Transient,
)

# pyVmomi's partial stubs make its constructors untyped calls; treat the namespaces as Any.
vim: Any = _vim
vmodl: Any = _vmodl


def fault_message(fault: object) -> str:
    """The human message of a vmodl.MethodFault (``msg`` or ``localizedMessage``), else its type."""
    msg = getattr(fault, "msg", None) or getattr(fault, "localizedMessage", None)
    if msg:
        return str(msg)
    return type(fault).__name__


def map_exception(exc: BaseException) -> BackendError:
    """Translate one exception raised by pyvmomi (in a worker thread) into a BackendError.

    vim.fault.InvalidLogin / NoPermission -> AuthFailed; certificate verification (untrusted CA,
    expired, wrong host name) -> TLSVerifyFailed; ManagedObjectNotFound / vim.fault.NotFound ->
    NotFound; InvalidArgument, InvalidDeviceSpec, FileFault-free config faults -> InvalidSpec;
    refused / reset / timed out, and any other TLS error (EOF during the handshake, protocol or
    cipher mismatch) -> Transient with reason ``ConnectFailed``; any other SOAP fault ->
    BackendError with the fault's type name as ``reason``.
    """
    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TLSVerifyFailed(f"TLS certificate verification failed: {getattr(exc, 'verify_message', None) or exc}")
    if isinstance(exc, ssl.SSLError):
        # Only a certificate that does not verify is a trust problem a CA bundle fixes. A
        # connection closed mid-handshake (SSLEOFError: a vCenter restarting, a load balancer
        # dropping it) or a handshake that fails otherwise means the endpoint cannot be talked
        # to right now: retried with back-off like a refused connection.
        return Transient(f"TLS handshake with vCenter failed: {type(exc).__name__}: {exc}", reason="ConnectFailed")
    if isinstance(exc, vim.fault.InvalidLogin):
        return AuthFailed("vCenter refused the credentials (InvalidLogin)")
    if isinstance(exc, vim.fault.NoPermission):
        return AuthFailed(f"permission denied: {fault_message(exc)}", reason="NoPermission")
    if isinstance(exc, vmodl.fault.ManagedObjectNotFound | vim.fault.NotFound):
        return NotFound(fault_message(exc))
    if isinstance(
        exc,
        vmodl.fault.InvalidArgument | vim.fault.InvalidDeviceSpec | vim.fault.InvalidName | vim.fault.DuplicateName,
    ):
        return InvalidSpec(fault_message(exc))
    if isinstance(exc, vim.fault.InvalidPowerState):
        return BackendError(fault_message(exc), reason="InvalidPowerState")
    if isinstance(exc, vmodl.fault.RequestCanceled):
        return Transient("request canceled", reason="RequestCanceled")
    if isinstance(exc, vmodl.MethodFault):
        return BackendError(fault_message(exc), reason=type(exc).__name__.split(".")[-1])
    if isinstance(exc, TimeoutError | socket.timeout):
        return Transient(f"vCenter did not answer in time: {exc}", reason="Timeout")
    if isinstance(exc, ConnectionError | http.client.HTTPException | OSError):
        return Transient(f"cannot reach vCenter: {type(exc).__name__}: {exc}", reason="ConnectFailed")
    return BackendError(f"{type(exc).__name__}: {exc}")


DUPLICATE_NAME = "DuplicateName"
"""``TaskFailed.reason`` of a task that ended in ``vim.fault.DuplicateName``: another VM of that
name is in the target folder (vCenter refuses two in one folder). Said apart from other task
failures so the machine can tell the user what to do (``VMNameInUse``)."""


def task_error(fault: object, what: str) -> TaskFailed:
    """A TaskFailed for a task that ended in ``fault`` (TaskInfo.error): reason
    ``DUPLICATE_NAME`` for ``vim.fault.DuplicateName``, else ``TaskFailed``."""
    if isinstance(fault, vim.fault.DuplicateName):
        return TaskFailed(f"{what}: {fault_message(fault)}", reason=DUPLICATE_NAME)
    return TaskFailed(f"{what}: {fault_message(fault)}")
