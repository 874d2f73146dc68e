"""Connection config: a kubeconfig file (path or $KUBECONFIG) or the in-cluster service account.

Like controller-runtime ``GetConfig``: explicit path, then $KUBECONFIG, then in-cluster, then
``~/.kube/config``. Request timeouts are explicit because kubernetes_asyncio >= 32 has none by
default (runtime-facts §6.1).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kubernetes_asyncio import config as ka_config
from kubernetes_asyncio.client import Configuration


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client timeouts in seconds: ``connect`` (TCP+TLS), ``request`` (total, non-watch requests),
    ``watch_margin`` (added to a watch's ``timeoutSeconds`` as the read timeout)."""

    connect: float = 5.0
    request: float = 30.0
    watch_margin: float = 10.0


async def load_config(
    kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None
) -> Configuration:
    """Return a kubernetes_asyncio ``Configuration``.

    Order (controller-runtime): ``kubeconfig`` argument, $KUBECONFIG (first path), in-cluster
    service account (KUBERNETES_SERVICE_HOST set), ``~/.kube/config``.
    Raises ``kubernetes_asyncio.config.ConfigException`` when none is usable.
    """
    cfg = Configuration()
    path = kubeconfig or (os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None)
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        ka_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cfg
    if path is None:
        path = Path.home() / ".kube" / "config"
    await ka_config.load_kube_config(config_file=str(path), context=context, client_configuration=cfg)
    return cfg


def config_for_url(host: str, *, token: str | None = None, verify_ssl: bool = True) -> Configuration:
    """A Configuration for a plain URL (tests: the API-server double on 127.0.0.1)."""
    cfg = Configuration(host=host)
    cfg.verify_ssl = verify_ssl
    if token:
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg
