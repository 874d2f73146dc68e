"""Connection config: a kubeconfig file (path or $KUBECONFIG) or the in-cluster service account.

Like controller-runtime ``GetConfig``: explicit path, then $KUBECONFIG, then in-cluster, then
``~/.kube/config``. Request timeouts are explicit because kubernetes_asyncio >= 32 has none by
default (runtime-facts §6.1).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes_asyncio import config as ka_config
from kubernetes_asyncio.client import Configuration


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client timeouts in seconds: ``connect`` (TCP+TLS), ``request`` (total, non-watch requests),
    ``watch_margin`` (added to a watch's ``timeoutSeconds`` as the read timeout)."""

    connect: float = 5.0
    request: float = 30.0
    watch_margin: float = 10.0


KUBECONFIG_KEYS = ("clusters", "users", "contexts")
"""Top-level keys of a kubeconfig file (clientcmd ``api.Config``); a file with none is not one."""


class KubeconfigError(ValueError):
    """A kubeconfig file cannot be used; ``str(err)`` is ``<path>: <what is wrong>``, one line,
    never file content (a kubeconfig holds tokens)."""


def check_kubeconfig_file(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` is a readable YAML mapping with at least one of ``clusters``,
    ``users``, ``contexts``. Raises KubeconfigError ("file not found", "cannot read it: ...",
    "not valid YAML ...", "not a kubeconfig file (...)"). kubernetes_asyncio itself fails on
    such files with errors that do not say what is wrong (``TypeError: 'str' object does not
    support item assignment`` for a text file; a warning, then "Expected key current-context",
    for a missing one)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KubeconfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise KubeconfigError(f"{path}: cannot read it: {type(err).__name__}: {getattr(err, 'strerror', None) or err}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise KubeconfigError(f"{path}: not valid YAML{where}") from None
    if not isinstance(doc, dict) or not any(key in doc for key in KUBECONFIG_KEYS):
        raise KubeconfigError(f"{path}: not a kubeconfig file (expected a YAML mapping with clusters, users, contexts)")


@contextlib.contextmanager
def _quiet_kubeconfig_loader() -> Iterator[None]:
    # kubernetes_asyncio logs "Config not found: <path>" as a warning before raising its own
    # error; the caller reports the failure in one line, so the warning is noise on stderr.
    logger = logging.getLogger("kubernetes_asyncio.config.kube_config")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


async def load_config(
    kubeconfig: str | os.PathLike[str] | None = None, *, context: str | None = None
) -> Configuration:
    """Return a kubernetes_asyncio ``Configuration``.

    Order (controller-runtime): ``kubeconfig`` argument (a path, or an ``os.pathsep``-separated
    list merged as in ``KUBECONFIG``), $KUBECONFIG (first path), in-cluster service account
    (KUBERNETES_SERVICE_HOST set), ``~/.kube/config``. Every file is checked first
    (``check_kubeconfig_file``). Raises KubeconfigError for a missing or malformed file and
    ``kubernetes_asyncio.config.ConfigException`` when the file is incomplete (e.g. no
    ``current-context``) or the in-cluster config is unusable.
    """
    cfg = Configuration()
    path = kubeconfig or (os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None)
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        ka_config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return cfg
    if path is None:
        path = Path.home() / ".kube" / "config"
    for part in str(path).split(os.pathsep):
        if part:
            check_kubeconfig_file(part)
    with _quiet_kubeconfig_loader():
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
