"""``banlieue crddoc``: write the Markdown API reference generated from the models.

``make generate`` writes ``docs/api-reference.md``; ``hack/check-generated.sh`` diffs it against a
fresh render so CI fails when a model (or its docstrings) changed without regenerating.
"""

from __future__ import annotations

import importlib

from banlieue.options import StartupError


def run(out: str) -> int:
    """Render the API reference (``banlieue.api.crddoc``) into file ``out``; returns exit code 0.

    Raises StartupError (one line, exit 1) when ``out`` cannot be written.
    """
    # Imported by name so the command surface does not depend on the API layer at import time.
    crddoc = importlib.import_module("banlieue.api.crddoc")
    try:
        crddoc.write_reference(out)
    except OSError as err:
        raise StartupError(f"crddoc: cannot write {err.filename or out}: {err.strerror or err}") from None
    return 0
