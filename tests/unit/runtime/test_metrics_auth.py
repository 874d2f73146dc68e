"""--metrics-secure's certificate (issue 23 case 7): a given directory, else a self-signed pair;
a bad directory is a one-line error naming the files. The authn/authz path is tested on
kube-apiserver (tests/envtest/test_tenant_safety.py::test_secure_metrics_need_a_token_allowed_to_get_metrics)."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path
from unittest.mock import sentinel

import pytest

from banlieue.runtime.health import HealthServer
from banlieue.runtime.metrics_auth import MetricsTLSError, server_ssl_context


def test_a_directory_without_the_pair_names_the_files(tmp_path: Path) -> None:
    with pytest.raises(MetricsTLSError, match=r"tls\.crt and .*tls\.key"):
        server_ssl_context(str(tmp_path))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_self_signed_when_no_directory_is_given() -> None:
    ctx = server_ssl_context(None)
    assert isinstance(ctx, ssl.SSLContext) and ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_secure_metrics_refuse_the_probes_address() -> None:
    # sentinel: an opaque stand-in for the authenticator, never called (the check is at construction).
    with pytest.raises(ValueError, match="own address"):
        HealthServer(metrics_bind_address="127.0.0.1:8081", health_probe_bind_address="127.0.0.1:8081",
                     metrics_auth=sentinel.auth)
