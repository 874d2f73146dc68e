"""connection: Provider + Secret + CA bundle -> backend Connection (SPEC §2 reasons)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from banlieue.api.provider import Provider
from banlieue.api.vmimage import ImageReason
from banlieue.reconcilers.connection import (
    ConnectionConfigError,
    connection_from_objects,
    referenced_config_maps,
    referenced_secrets,
)
from banlieue.reconcilers.provider.decide import Failure, reason_of
from banlieue.reconcilers.provider.decide import _failure_message as provider_message
from banlieue.reconcilers.vmimage.decide import CONNECT_MESSAGE, Lookup, Target, row_for

# A real self-signed CA certificate (P-256, CN=banlieue-test-ca): the CA bundle is parsed.
PEM = """-----BEGIN CERTIFICATE-----
MIIBjTCCATOgAwIBAgIUScvON9a98F3do+xRTzNiAF5dJtwwCgYIKoZIzj0EAwIw
GzEZMBcGA1UEAwwQYmFubGlldWUtdGVzdC1jYTAgFw0yNjExMzAwMjE2MDFaGA8y
MTI2MTEwNjAyMTYwMVowGzEZMBcGA1UEAwwQYmFubGlldWUtdGVzdC1jYTBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABELbbGcdZ2Ln/dnZjVRBGIO5mKuNzu1i1t5N
CHzUtAKj12QoXQZ5g5rHGvloaOhnRW859lOWMRNf5Q6TG5rLq9WjUzBRMB0GA1Ud
DgQWBBRXYRlwCBD7FYwQVPVgEx6osA1tSjAfBgNVHSMEGDAWgBRXYRlwCBD7FYwQ
VPVgEx6osA1tSjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0gAMEUCIHz0
zaT2J9G9Elto7hiEqqsUQO4QmLgJikpfyEX9i/S0AiEAjOR++ZkfaSZfWPcGBa0S
m8O0Z1sUiorPARH9tS0AlXs=
-----END CERTIFICATE-----
"""


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
        pytest.param({"inline": PEM}, None, PEM, id="inline"),
        pytest.param({"configMapRef": {"name": "cm"}}, {"data": {"ca.crt": PEM}}, PEM, id="configmap-default-key"),
        pytest.param({"configMapRef": {"name": "cm"}}, {"binaryData": {"ca.crt": _b64(PEM)}}, PEM, id="configmap-binary-data"),
        pytest.param({"secretRef": {"name": "s", "key": "x.pem"}}, {"data": {"x.pem": _b64(PEM)}}, PEM, id="secret-custom-key"),
    ],
)
def test_ca_bundle_sources(ca: dict[str, Any], source: dict[str, Any] | None, want: str) -> None:
    assert connection_from_objects(provider(ca), CREDS, source).ca_bundle == want


@pytest.mark.parametrize(
    ("prov", "secret", "source", "reason", "fragment", "detail"),
    [
        pytest.param(provider(), None, None, "SecretMissing", "spec.connection.credentialsRef names a Secret",
                     "Secret ns/creds not found", id="secret-missing"),
        pytest.param(provider(), {"data": {"username": _b64("u")}}, None, "SecretInvalid", "'username' and 'password'",
                     "no non-empty key 'password'", id="password-missing"),
        pytest.param(provider(), {"data": {"username": "!!", "password": _b64("p")}}, None, "SecretInvalid",
                     "'username' and 'password'", "base64", id="bad-base64"),
        pytest.param(provider({"configMapRef": {"name": "cm"}}), CREDS, None, "SecretMissing",
                     "spec.connection.caBundle.configMapRef names a ConfigMap", "ConfigMap ns/cm not found", id="ca-configmap-missing"),
        pytest.param(provider({"secretRef": {"name": "cas"}}), CREDS, {"data": {}}, "SecretInvalid",
                     "spec.connection.caBundle.secretRef has no CA bundle", "no non-empty key 'ca.crt'", id="ca-key-missing"),
        pytest.param(provider({"inline": "not a pem"}), CREDS, None, "TLSVerifyFailed", "(read from inline)", "inline", id="ca-inline-not-pem"),
        pytest.param(provider({"inline": "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"}), CREDS, None,
                     "TLSVerifyFailed", "not a valid PEM certificate bundle", "does not load", id="ca-inline-garbage-block"),
        pytest.param(provider({"configMapRef": {"name": "cm"}}), CREDS, {"data": {"ca.crt": "x"}}, "TLSVerifyFailed",
                     "(read from spec.connection.caBundle.configMapRef)", "does not load", id="ca-configmap-not-pem"),
        pytest.param(provider({"secretRef": {"name": "cas", "key": "ca.pem"}}), CREDS, {"data": {"ca.pem": _b64("é")}},
                     "TLSVerifyFailed", "(read from spec.connection.caBundle.secretRef)", "does not load", id="ca-secret-not-ascii"),
    ],
)
def test_errors_carry_spec_reasons(
    prov: Provider, secret: dict[str, Any] | None, source: dict[str, Any] | None, reason: str, fragment: str, detail: str
) -> None:
    with pytest.raises(ConnectionConfigError) as err:
        connection_from_objects(prov, secret, source)
    assert err.value.reason == reason
    assert fragment in str(err.value)
    assert detail in err.value.detail
    # Issue 23 case 8: what the referenced object holds (which key is missing, the object's
    # namespace/name as stored) is in the log's detail, not in the status message.
    assert "ns/c" not in str(err.value) and "ca.crt'" not in str(err.value)


def test_referenced_objects() -> None:
    assert referenced_secrets(provider({"secretRef": {"name": "cas"}})) == ["creds", "cas"]
    assert referenced_config_maps(provider({"configMapRef": {"name": "cm"}})) == ["cm"]
    assert referenced_config_maps(provider()) == []


def test_insecure_skip_tls_verify_does_not_parse_the_unused_bundle() -> None:
    assert connection_from_objects(provider({"inline": "not a pem"}, insecure=True), CREDS).ca_bundle == "not a pem"


def test_unparsable_ca_is_tls_verify_failed_on_provider_and_connect_failed_on_image_rows() -> None:
    with pytest.raises(ConnectionConfigError) as caught:
        connection_from_objects(provider({"inline": "not a pem"}), CREDS)
    err = caught.value
    assert err.message.startswith("spec.connection.caBundle is not a valid PEM certificate bundle (read from inline)")
    assert err.message.endswith("; fix the CA bundle (inline, ConfigMap or Secret key ca.crt)") and "_ssl.c" not in err.detail
    prov = provider({"inline": "not a pem"})
    failure = Failure("config", err.reason, err.message)
    assert reason_of(failure) == "TLSVerifyFailed"
    assert provider_message(prov, failure, reason_of(failure)) == err.message
    row = row_for("ubuntu", Target("ns", "vc1", "ubuntu", ()), Lookup(config_error=(err.reason, err.message)))
    # The image row points at the Provider's condition, which has the message (issue 23).
    assert (row.reason, row.message, row.ready) == (ImageReason.CONNECT_FAILED, CONNECT_MESSAGE, False)
