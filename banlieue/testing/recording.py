"""A recording reconciler: the Reconciler double the runtime tests (unit and integration) hand to
a Controller when what matters is which requests reached ``reconcile`` and in what order.

Public API:

- ``RecordingReconciler``: ``calls`` (every reconciled Request, in call order); ``reconcile``
  appends the request and returns ``Result()`` (success: the controller forgets the request).
"""

from __future__ import annotations

from banlieue.runtime.reconcile import Request, Result


class RecordingReconciler:
    """Records each reconciled request in ``calls``; always succeeds (``Result()``), never raises.

    Satisfies :class:`banlieue.runtime.reconcile.Reconciler`.
    """

    def __init__(self) -> None:
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        """Append ``request`` to ``calls``; return ``Result()``."""
        self.calls.append(request)
        return Result()
