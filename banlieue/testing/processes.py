"""Stopping the child processes a test environment started (envtest, kubectl proxy, the API
double's subprocess)."""

from __future__ import annotations

import subprocess
from typing import Any

STOP_GRACE_SECONDS = 10.0
"""How long a child has to exit after SIGTERM before it is killed."""


def terminate(process: subprocess.Popen[Any], grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGTERM ``process`` and wait up to ``grace`` seconds; then SIGKILL and wait up to 10 s
    more (raises subprocess.TimeoutExpired only if even that is not reaped). Nothing when it
    has exited already."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
