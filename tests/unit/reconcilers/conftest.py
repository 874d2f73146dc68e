"""The reconciler unit tests, one directory per controller package of banlieue/reconcilers.

No fixtures: this file puts tests/unit/reconcilers on ``sys.path`` (pytest's default ``prepend``
import mode), so the tests in the controller directories import the shared builders as
``from reconciler_objects import ...``.
"""
