"""--allowed-endpoint-cidrs (issue 23 case 5): parsing and the check made before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from banlieue.backends.base import BackendError, Transient
from banlieue.backends.vsphere.allowlist import ENDPOINT_NOT_ALLOWED, check_endpoint, parse_networks
from banlieue.cmd.parser import parse_command
from banlieue.options import UsageError


def test_parse_networks_accepts_cidrs_and_bare_addresses() -> None:
    nets = parse_networks("10.0.0.0/8, 192.168.1.5 ,fd00::/8")
    assert [str(n) for n in nets] == ["10.0.0.0/8", "192.168.1.5/32", "fd00::/8"]
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300' is not one"):
        parse_networks("10.0.0.0/8,10.0.0.300")
    with pytest.raises(ValueError, match="at least one"):
        parse_networks(" , ")


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1", "127.0.0.0/8"),
    ("127.0.0.7", "127.0.0.7"),
    ("[::1]", "::1/128"),
])
def test_addresses_inside_pass(host: str, allowed: str) -> None:
    check_endpoint(host, 443, parse_networks(allowed))


@pytest.mark.parametrize(("host", "allowed"), [
    ("127.0.0.1", "10.0.0.0/8"),
    ("169.254.169.254", "10.0.0.0/8,127.0.0.0/8"),  # cloud metadata
    ("::1", "127.0.0.0/8"),
])
def test_addresses_outside_are_refused_with_their_reason(host: str, allowed: str) -> None:
    with pytest.raises(BackendError) as err:
        check_endpoint(host, 443, parse_networks(allowed))
    assert err.value.reason == ENDPOINT_NOT_ALLOWED and "outside --allowed-endpoint-cidrs" in str(err.value)


def test_a_name_that_does_not_resolve_is_transient() -> None:
    with pytest.raises(Transient):
        check_endpoint("no-such-host.invalid", 443, parse_networks("10.0.0.0/8"))


def test_the_flag_is_validated_with_a_one_line_error(tmp_path: Path) -> None:
    isolated = {"home": tmp_path, "sa_namespace_file": tmp_path / "none"}
    with pytest.raises(UsageError, match="--allowed-endpoint-cidrs"):
        parse_command(["provider", "vsphere", "--allowed-endpoint-cidrs=10.0.0.0/33"], {}, **isolated)
