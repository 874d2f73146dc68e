"""``session.parse_endpoint``: what a Provider's ``spec.connection.endpoint`` means, and a
``BackendError`` (``InvalidEndpoint``), never a bare ``ValueError``, for what cannot be used
(new-user finding: port 99999 raised ValueError out of every VMImage lookup, for all tenants)."""

from __future__ import annotations

import pytest

from banlieue.backends.base import BackendError
from banlieue.backends.vsphere.session import parse_endpoint


@pytest.mark.parametrize(
    ("endpoint", "want"),
    [
        ("vc.example", ("https", "vc.example", 443)),
        ("127.0.0.1:8989", ("https", "127.0.0.1", 8989)),
        ("HTTPS://127.0.0.1/sdk", ("https", "127.0.0.1", 443)),
        ("http://127.0.0.1:65535/sdk", ("http", "127.0.0.1", 65535)),
        ("https://[::1]:443/sdk", ("https", "::1", 443)),
    ],
)
def test_endpoint_forms(endpoint: str, want: tuple[str, str, int]) -> None:
    assert parse_endpoint(endpoint) == want


@pytest.mark.parametrize("endpoint", ["https://127.0.0.1:99999/sdk", "127.0.0.1:65536", "ftp://127.0.0.1/sdk", "https:///sdk"])
def test_unusable_endpoints_are_a_backend_error(endpoint: str) -> None:
    with pytest.raises(BackendError) as err:
        parse_endpoint(endpoint)
    assert err.value.reason == "InvalidEndpoint"
