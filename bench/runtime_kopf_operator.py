"""kopf doing the trivial reconcile of bench/runtime.py: mark each Widget ``status.reconciled``.

Run as ``kopf run --standalone --namespace NS bench/runtime_kopf_operator.py``. Event posting is
off (banlieue's bench controller posts none either); kopf's own progress/diff-base persistence
stays, as that is how kopf works.
"""

from __future__ import annotations

from typing import Any

import kopf


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False
    settings.watching.server_timeout = 300


@kopf.on.create("bench.banlieue.io", "v1", "widgets")
async def mark(patch: kopf.Patch, status: Any, **_: Any) -> None:
    if not (status or {}).get("reconciled"):
        patch.status["reconciled"] = True
