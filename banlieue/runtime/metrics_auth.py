"""``/metrics`` behind authentication and authorization, as controller-runtime serves it by
default since v0.16 with ``metricsserver.Options{SecureServing: true, FilterProvider:
filters.WithAuthenticationAndAuthorization}`` (issue 23 case 7, docs/security.md):

- HTTPS: the certificate and key from ``--metrics-cert-dir`` (``tls.crt``, ``tls.key``, as
  controller-runtime's ``CertDir``/``CertName``/``KeyName``), else a self-signed pair made at
  start by the ``openssl`` command (ECDSA P-256, 1 year, SAN ``localhost``/``127.0.0.1``);
- authentication: the request's ``Authorization: Bearer <token>`` sent to the API server in a
  ``TokenReview`` (authentication.k8s.io/v1); none, or not authenticated -> 401;
- authorization: a ``SubjectAccessReview`` (authorization.k8s.io/v1) for the reviewed user,
  groups, uid and extra with ``nonResourceAttributes {path: /metrics, verb: get}``; not allowed
  -> 403. Grant it with the ClusterRole ``banlieue-metrics-reader`` (config/rbac).

Both answers are cached per token for ``CACHE_SECONDS`` (as the apiserver's delegating
authenticator/authorizer cache them), so a scrape every 15 s costs at most two API requests per
token and period; an API server error gives 500 and is not cached. The manager's ServiceAccount
needs ``create`` on tokenreviews and subjectaccessreviews (config/rbac, every role).
"""

from __future__ import annotations

import hashlib
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from banlieue.runtime.client import Client
from banlieue.runtime.errors import ApiError

log = structlog.get_logger("banlieue.runtime.metrics_auth")

CACHE_SECONDS = 10.0
"""How long a token's authentication and authorization answer is reused (seconds)."""
METRICS_PATH = "/metrics"


class MetricsTLSError(RuntimeError):
    """The metrics certificate could not be loaded or made (message names the file or command)."""


def server_ssl_context(cert_dir: str | None) -> ssl.SSLContext:
    """The TLS server context of the metrics listener (module docstring). Raises MetricsTLSError."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_dir is not None:
        crt, key = Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key"
        try:
            ctx.load_cert_chain(crt, key)
        except (OSError, ssl.SSLError) as err:
            raise MetricsTLSError(f"--metrics-cert-dir: cannot load {crt} and {key}: {err}") from err
        return ctx
    openssl = shutil.which("openssl")
    if openssl is None:
        raise MetricsTLSError("--metrics-secure without --metrics-cert-dir needs the openssl command to make a "
                              "self-signed certificate; give --metrics-cert-dir with tls.crt and tls.key")
    with tempfile.TemporaryDirectory(prefix="banlieue-metrics-") as tmp:
        crt, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        argv = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", str(key), "-out", str(crt), "-days", "365", "-subj", "/CN=banlieue-metrics",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise MetricsTLSError(f"openssl could not make the self-signed metrics certificate: {done.stderr.strip()}")
        ctx.load_cert_chain(crt, key)
    log.info("metrics served with a self-signed certificate", subject="CN=banlieue-metrics")
    return ctx


class MetricsAuth:
    """TokenReview + SubjectAccessReview for ``GET /metrics`` (module docstring)."""

    def __init__(self, client: Client, cache_seconds: float = CACHE_SECONDS) -> None:
        self.client = client
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, int]] = {}
        self.reviews = 0
        """API requests made (TokenReview + SubjectAccessReview), for tests."""

    async def _decide(self, token: str) -> int:
        """200, 401 or 403 for ``token``. Raises ApiError when the API server fails."""
        review = await self.client.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        self.reviews += 1
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return 401
        user = status.get("user") or {}
        spec: dict[str, Any] = {"user": user.get("username", ""), "groups": user.get("groups") or [],
                                "nonResourceAttributes": {"path": METRICS_PATH, "verb": "get"}}
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        sar = await self.client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
        self.reviews += 1
        return 200 if (sar.get("status") or {}).get("allowed") else 403

    async def check(self, request: web.Request) -> int:
        """200 when the request may read /metrics, else 401 / 403 / 500."""
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return 401
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        try:
            code = await self._decide(token.strip())
        except ApiError as err:
            log.warning("metrics authentication/authorization request failed", status=err.status, reason=err.reason)
            return 500
        if len(self._cache) > 1000:  # bounded: many distinct bad tokens must not grow memory
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < self.cache_seconds}
        self._cache[key] = (now, code)
        return code


_TEXT = {401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error"}


def guarded(auth: MetricsAuth, handler: Any) -> Any:
    """``handler`` answering only requests ``auth`` allows (else 401/403/500 with a one-line body)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        code = await auth.check(request)
        if code != 200:
            return web.Response(status=code, text=_TEXT.get(code, "error") + "\n")
        response: web.StreamResponse = await handler(request)
        return response

    return handle
