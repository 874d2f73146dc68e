"""An in-memory Kubernetes API-server double that behaves like kube-apiserver on the wire.

- In-process: ``server = ApiServer(bookmark_interval=1.0); url = await server.start("127.0.0.1", 0)``
  ... ``await server.stop()``; in tests use the ``apiserver`` pytest fixture
  (:mod:`banlieue.testing.apiserver.fixture`).
- Separate process: ``python -m banlieue.testing.apiserver --port PORT [--host 127.0.0.1]
  [--crd-dir DIR] [--bookmark-interval SECONDS]`` (prints its URL), or
  :func:`banlieue.testing.apiserver.fixture.start_subprocess`.
- Faults and the request log: ``server.faults`` (:class:`~.faults.Faults`), ``server.drop_watches()``,
  ``server.compact()``, ``server.request_log()``; over HTTP at ``/debug/faults`` and
  ``/debug/requests``.
"""

from .server import ApiServer, RequestRecord

__all__ = ["ApiServer", "RequestRecord"]
