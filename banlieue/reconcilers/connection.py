"""Build a backend ``Connection`` from a Provider, its credentials Secret and its CA bundle.

Shared by the provider-role reconcilers (Provider, VMImage, VSphereMachine). SPEC §2:
``Provider.spec.connection{endpoint, credentialsRef{name} (Secret keys username, password),
insecureSkipTLSVerify, caBundle{inline | configMapRef{name,key} | secretRef{name,key}} (key
default ca.crt)}``. Errors carry the SPEC's ``ProviderReachable`` reasons:

- ``SecretMissing``: the credentials Secret, or the ConfigMap/Secret named by ``caBundle``, is not
  in the cache (absent, or not yet synced).
- ``SecretInvalid``: it exists but a key is missing, empty, or not valid base64/UTF-8.
- ``TLSVerifyFailed``: the CA bundle (inline, or read from the ConfigMap/Secret) is not a PEM
  certificate bundle OpenSSL loads. A configuration error found before anything is sent to
  vCenter, reported with the reason the SPEC gives for a certificate that does not verify, so
  the Provider, its VMImage rows and its VSphereMachines name the same fix. Not checked when
  ``insecureSkipTLSVerify`` is set (the bundle is not used then).

Reads come from the role's store of referenced objects (``referenced.referenced(cache)``: direct
GETs of the names a Provider references, never a Secret list or watch); a reconcile calls
``ReferencedObjects.fetch_provider`` before ``connection_for``. Messages name the object and key,
never a value.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
import ssl
from collections.abc import Mapping
from typing import Any

from banlieue.api.provider import Provider, ProviderConditionReason
from banlieue.backends.base import Connection
from banlieue.reconcilers.referenced import referenced
from banlieue.runtime.cache import Cache
from banlieue.runtime.kinds import CONFIG_MAP, SECRET

USERNAME_KEY = "username"
PASSWORD_KEY = "password"


class ConnectionConfigError(Exception):
    """The Provider's connection cannot be built. ``reason`` is ``SecretMissing``,
    ``SecretInvalid``, ``TLSVerifyFailed`` or ``InsecureEndpoint`` (SPEC §2 ``ProviderReachable``
    reasons); ``str(err)`` / ``message`` is the actionable message for conditions: it names the
    spec field at fault, never what the referenced object holds (which key is missing, what
    failed to decode): whoever reads the Provider's status may not be allowed to read that
    Secret (issue 23 case 8). ``detail`` is the precise cause, for the manager's log only; never
    a secret value."""

    def __init__(self, reason: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.detail = detail or message


def _missing(field: str, kind: str, namespace: str | None, name: str) -> ConnectionConfigError:
    return ConnectionConfigError(
        ProviderConditionReason.SECRET_MISSING,
        f"{field} names a {kind} banlieue cannot read in the Provider's namespace: create it there",
        f"{kind} {namespace}/{name} not found",
    )


CREDENTIALS_FIELD = "spec.connection.credentialsRef"
CA_CONFIG_MAP_FIELD = "spec.connection.caBundle.configMapRef"
CA_SECRET_FIELD = "spec.connection.caBundle.secretRef"


_SSL_LOCATION = re.compile(r"\s*\(_ssl\.c:\d+\)$")


@functools.lru_cache(maxsize=64)
def _ca_bundle_error(pem: str) -> str | None:
    """Why ``pem`` does not load as a CA bundle (None when it loads). Cached by content: every
    VSphereMachine reconcile checks its Provider's bundle, and building an SSLContext cost 7%
    of the manager's CPU while 1,000 VMs were provisioned (docs/performance.md)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError, TypeError) as exc:  # TypeError: text that is not ASCII
        return _SSL_LOCATION.sub("", str(exc)) or type(exc).__name__
    return None


def _no_bundle(field: str, kind: str) -> str:
    return f"the {kind} named in {field} has no CA bundle (non-empty PEM text) under the key {field}.key names"


def check_ca_bundle(pem: str, source: str) -> None:
    """Raise ConnectionConfigError(``TLSVerifyFailed``) when ``pem`` is not a PEM certificate
    bundle: the same load the vSphere session does (``ssl`` ``load_verify_locations(cadata=)``),
    so what passes here is what the session accepts. ``source`` names where the bundle was read
    (``inline``, the spec field ``spec.connection.caBundle.configMapRef``) for the message; the
    SSL library's reason goes to ``detail`` (logs); the PEM is never quoted."""
    detail = _ca_bundle_error(pem)
    if detail is not None:
        raise ConnectionConfigError(
            ProviderConditionReason.TLS_VERIFY_FAILED,
            f"spec.connection.caBundle is not a valid PEM certificate bundle (read from {source}); "
            "fix the CA bundle (inline, ConfigMap or Secret key ca.crt)",
            f"CA bundle from {source} does not load: {detail}",
        )


def secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    """The UTF-8 text of ``key`` in a Secret (``data`` base64, else ``stringData``); None when
    the key is absent. Raises ConnectionConfigError(SecretInvalid) on bad base64 or UTF-8."""
    data = secret.get("data") or {}
    if key in data:
        try:
            return base64.b64decode(str(data[key]), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            name = (secret.get("metadata") or {}).get("name", "?")
            raise ConnectionConfigError(
                ProviderConditionReason.SECRET_INVALID, f"Secret {name} key {key!r} is not valid base64-encoded UTF-8 text"
            ) from exc
    string_data = secret.get("stringData") or {}
    if key in string_data:
        return str(string_data[key])
    return None


def connection_from_objects(
    provider: Provider,
    secret: Mapping[str, Any] | None,
    ca_source: Mapping[str, Any] | None = None,
    *,
    allow_http: bool = False,
) -> Connection:
    """Pure: the Connection of ``provider`` given its credentials Secret and (when
    ``caBundle`` names a ConfigMap or Secret) that object as wire dicts; None = not found.
    Raises ConnectionConfigError (InsecureEndpoint for ``http://`` unless ``allow_http`` /
    SecretMissing / SecretInvalid / TLSVerifyFailed). Its ``vcenter_instance_uuid`` is the
    Provider's recorded ``status.vcenter.instanceUUID`` (ADR 0013)."""
    ns = provider.metadata.namespace
    conn = provider.spec.connection
    cred_name = conn.credentials_ref.name
    if conn.endpoint.strip().lower().startswith("http://") and not allow_http:
        # Checked before any Secret is read: the credentials would cross the network in clear
        # text (issue 23). Admission refuses it too (config/admission/provider-https-endpoint).
        raise ConnectionConfigError(
            ProviderConditionReason.INSECURE_ENDPOINT,
            "spec.connection.endpoint uses http://, which would send the credentials in clear text: "
            "use https:// (http is accepted only with --development-allow-http-endpoints)",
        )
    if secret is None:
        raise _missing(CREDENTIALS_FIELD, "Secret", ns, cred_name)
    invalid_credentials = (f"the Secret named in {CREDENTIALS_FIELD} must hold the keys {USERNAME_KEY!r} and "
                           f"{PASSWORD_KEY!r}, non-empty UTF-8 text")
    try:
        username = secret_value(secret, USERNAME_KEY)
        password = secret_value(secret, PASSWORD_KEY)
    except ConnectionConfigError as err:
        raise ConnectionConfigError(err.reason, invalid_credentials, f"{ns}/{err.detail}") from err
    for key, value in ((USERNAME_KEY, username), (PASSWORD_KEY, password)):
        if not value:
            raise ConnectionConfigError(
                ProviderConditionReason.SECRET_INVALID, invalid_credentials,
                f"Secret {ns}/{cred_name} has no non-empty key {key!r}",
            )
    assert username is not None and password is not None
    ca_bundle: str | None = None
    source = "inline"
    bundle = conn.ca_bundle
    if bundle is not None:
        if bundle.inline:
            ca_bundle = bundle.inline
        elif bundle.config_map_ref is not None:
            ref = bundle.config_map_ref
            if ca_source is None:
                raise _missing(CA_CONFIG_MAP_FIELD, "ConfigMap", ns, ref.name)
            ca_bundle = (ca_source.get("data") or {}).get(ref.key)
            if ca_bundle is None:
                binary = (ca_source.get("binaryData") or {}).get(ref.key)
                try:
                    ca_bundle = base64.b64decode(str(binary), validate=True).decode("utf-8", "replace") if binary else None
                except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII text
                    raise ConnectionConfigError(
                        ProviderConditionReason.SECRET_INVALID, _no_bundle(CA_CONFIG_MAP_FIELD, "ConfigMap"),
                        f"ConfigMap {ns}/{ref.name} binaryData key {ref.key!r} is not valid base64 (CA bundle)",
                    ) from exc
            if not ca_bundle:
                raise ConnectionConfigError(
                    ProviderConditionReason.SECRET_INVALID, _no_bundle(CA_CONFIG_MAP_FIELD, "ConfigMap"),
                    f"ConfigMap {ns}/{ref.name} has no non-empty key {ref.key!r} (CA bundle)",
                )
            source = CA_CONFIG_MAP_FIELD
        elif bundle.secret_ref is not None:
            ref = bundle.secret_ref
            if ca_source is None:
                raise _missing(CA_SECRET_FIELD, "Secret", ns, ref.name)
            try:
                ca_bundle = secret_value(ca_source, ref.key)
            except ConnectionConfigError as err:
                raise ConnectionConfigError(err.reason, _no_bundle(CA_SECRET_FIELD, "Secret"), f"{ns}/{err.detail}") from err
            if not ca_bundle:
                raise ConnectionConfigError(
                    ProviderConditionReason.SECRET_INVALID, _no_bundle(CA_SECRET_FIELD, "Secret"),
                    f"Secret {ns}/{ref.name} has no non-empty key {ref.key!r} (CA bundle)",
                )
            source = CA_SECRET_FIELD
    if ca_bundle and not conn.insecure_skip_tls_verify:
        check_ca_bundle(ca_bundle, source)
    recorded = provider.status.vcenter if provider.status is not None else None
    return Connection(
        provider=f"{ns}/{provider.metadata.name}",
        endpoint=conn.endpoint,
        username=username,
        password=password,
        ca_bundle=ca_bundle,
        insecure_skip_tls_verify=conn.insecure_skip_tls_verify,
        # The vCenter its machines live in: calls reaching another one are refused (ADR 0013).
        vcenter_instance_uuid=recorded.instance_uuid if recorded is not None else None,
    )


def referenced_secrets(provider: Provider) -> list[str]:
    """Names of the Secrets (same namespace) ``provider`` reads: credentials, CA secretRef."""
    conn = provider.spec.connection
    names = [conn.credentials_ref.name]
    if conn.ca_bundle is not None and conn.ca_bundle.secret_ref is not None:
        names.append(conn.ca_bundle.secret_ref.name)
    return names


def referenced_config_maps(provider: Provider) -> list[str]:
    """Names of the ConfigMaps (same namespace) ``provider`` reads: the CA configMapRef."""
    bundle = provider.spec.connection.ca_bundle
    return [bundle.config_map_ref.name] if bundle is not None and bundle.config_map_ref is not None else []


def connection_for(provider: Provider, cache: Cache) -> Connection:
    """The Connection of ``provider`` from the Secret/ConfigMap objects last fetched into the
    role's referenced-object store (``referenced(cache)``; fetch them first).

    Raises ConnectionConfigError(reason, message) with reason ``SecretMissing``,
    ``SecretInvalid`` or ``TLSVerifyFailed`` (SPEC §2 Provider reasons)."""
    ns = provider.metadata.namespace
    store = referenced(cache)
    secret = store.get(SECRET, provider.spec.connection.credentials_ref.name, ns)
    ca_source: Mapping[str, Any] | None = None
    bundle = provider.spec.connection.ca_bundle
    if bundle is not None and not bundle.inline:
        if bundle.config_map_ref is not None:
            ca_source = store.get(CONFIG_MAP, bundle.config_map_ref.name, ns)
        elif bundle.secret_ref is not None:
            ca_source = store.get(SECRET, bundle.secret_ref.name, ns)
    return connection_from_objects(provider, secret, ca_source, allow_http=store.allow_http_endpoints)
