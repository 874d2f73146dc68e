"""Role runners: wire the runtime Manager with the reconcilers of one role (SPEC §4).

PLACEHOLDER — the lead replaces :func:`run_role` with the real wiring (Manager, caches,
controllers, leader election per role, probes, metrics). Contract for that implementation:

* ``role`` is one of ``banlieue.options.ROLES``: ``"controller"`` (VirtualMachine,
  VSphereCluster; field manager ``banlieue.io/controller``, Lease ``banlieue-controller``),
  ``"provider-vsphere"`` (Provider, VMImage, VSphereMachine, VSphereMachineTemplate; field
  manager ``banlieue.io/provider-vsphere``, Lease ``banlieue-provider-vsphere``) or ``"manager"``
  (both, each with its own field manager and Lease).
* Return the process exit code (0 after a graceful SIGTERM/SIGINT shutdown).
* Raise :class:`banlieue.options.StartupError` with a one-line, credential-free message when the
  process cannot start (kubeconfig unusable, API server unreachable, port in use); ``main``
  prints it and exits 1. Fail fast: do not retry the first API contact forever.
* Logging is already configured (``banlieue.runtime.log.configure_logging``) from ``options``.
"""

from __future__ import annotations

from banlieue.options import Options, StartupError


async def run_role(role: str, options: Options) -> int:
    """Run ``role`` until shutdown; returns the exit code. Raises StartupError (see module doc)."""
    # NOT IMPLEMENTED: replaced by the lead with the Manager + reconciler wiring.
    raise StartupError("role wiring not implemented yet")
