"""vsphere_connection: Provider + Secret + CA bundle -> backend Connection (SPEC §2 reasons)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from banlieue.api.provider import Provider
from banlieue.reconcilers.vsphere_connection import (
    ConnectionConfigError,
    connection_from_objects,
    referenced_config_maps,
    referenced_secrets,
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def provider(ca: dict[str, Any] | None = None, insecure: bool = False) -> Provider:
    conn: dict[str, Any] = {"endpoint": "vc.example:443", "credentialsRef": {"name": "creds"}, "insecureSkipTLSVerify": insecure}
    if ca is not None:
        conn["caBundle"] = ca
    return Provider.from_wire(
        {"metadata": {"name": "vc1", "namespace": "ns"}, "spec": {"providerClassRef": {"name": "vsphere"}, "connection": conn}}
    )


CREDS = {"metadata": {"name": "creds"}, "data": {"username": _b64("admin"), "password": _b64("s3cret")}}


def test_credentials_and_no_ca() -> None:
    conn = connection_from_objects(provider(insecure=True), CREDS)
    assert (conn.provider, conn.endpoint, conn.username, conn.password) == ("ns/vc1", "vc.example:443", "admin", "s3cret")
    assert conn.ca_bundle is None and conn.insecure_skip_tls_verify is True


def test_string_data_is_read() -> None:
    conn = connection_from_objects(provider(), {"stringData": {"username": "u", "password": "p"}})
    assert (conn.username, conn.password) == ("u", "p")


@pytest.mark.parametrize(
    ("ca", "source", "want"),
    [
        pytest.param({"inline": "PEM-INLINE"}, None, "PEM-INLINE", id="inline"),
        pytest.param({"configMapRef": {"name": "cm"}}, {"data": {"ca.crt": "PEM-CM"}}, "PEM-CM", id="configmap-default-key"),
        pytest.param({"secretRef": {"name": "s", "key": "x.pem"}}, {"data": {"x.pem": _b64("PEM-S")}}, "PEM-S", id="secret-custom-key"),
    ],
)
def test_ca_bundle_sources(ca: dict[str, Any], source: dict[str, Any] | None, want: str) -> None:
    assert connection_from_objects(provider(ca), CREDS, source).ca_bundle == want


@pytest.mark.parametrize(
    ("prov", "secret", "source", "reason", "fragment"),
    [
        pytest.param(provider(), None, None, "SecretMissing", "Secret ns/creds not found", id="secret-missing"),
        pytest.param(provider(), {"data": {"username": _b64("u")}}, None, "SecretInvalid", "'password'", id="password-missing"),
        pytest.param(provider(), {"data": {"username": "!!", "password": _b64("p")}}, None, "SecretInvalid", "base64", id="bad-base64"),
        pytest.param(provider({"configMapRef": {"name": "cm"}}), CREDS, None, "SecretMissing", "ConfigMap ns/cm", id="ca-configmap-missing"),
        pytest.param(provider({"secretRef": {"name": "cas"}}), CREDS, {"data": {}}, "SecretInvalid", "'ca.crt'", id="ca-key-missing"),
    ],
)
def test_errors_carry_spec_reasons(
    prov: Provider, secret: dict[str, Any] | None, source: dict[str, Any] | None, reason: str, fragment: str
) -> None:
    with pytest.raises(ConnectionConfigError) as err:
        connection_from_objects(prov, secret, source)
    assert err.value.reason == reason
    assert fragment in str(err.value)
    assert "s3cret" not in str(err.value)


def test_referenced_objects() -> None:
    assert referenced_secrets(provider({"secretRef": {"name": "cas"}})) == ["creds", "cas"]
    assert referenced_config_maps(provider({"configMapRef": {"name": "cm"}})) == ["cm"]
    assert referenced_config_maps(provider()) == []
