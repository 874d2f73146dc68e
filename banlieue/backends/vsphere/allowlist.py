"""The optional endpoint allow-list (``--allowed-endpoint-cidrs``, issue 23 case 5).

A Provider's endpoint makes the manager connect wherever its writer points it (SSRF). With an
allow-list, a session is opened only when **every** address the endpoint's host resolves to
(``getaddrinfo``; an IP literal is its own address) is inside one of the allowed networks;
otherwise ``EndpointNotAllowed`` is raised before any connection is attempted and the Provider
reports ``ProviderReachable=False`` reason ``EndpointNotAllowed``. The check runs at each login
(in the endpoint's pool: resolution blocks); the TLS connection then resolves the name again, so
a DNS answer that changes between the two (rebinding) is not caught here: the egress
NetworkPolicy (config/network-policy) is the enforcing layer, this flag the early, explained
refusal.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from banlieue.backends.base import BackendError, Transient
from banlieue.options import Network, parse_networks

__all__ = ["ENDPOINT_NOT_ALLOWED", "Network", "check_endpoint", "parse_networks"]

ENDPOINT_NOT_ALLOWED = "EndpointNotAllowed"
"""BackendError reason (and Provider condition reason) of an endpoint outside the allow-list."""

def check_endpoint(host: str, port: int, allowed: Sequence[Network]) -> None:
    """Raise BackendError(reason ``EndpointNotAllowed``) unless every address of ``host`` is in
    ``allowed``; Transient when the name does not resolve. Blocks (DNS)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise Transient(f"cannot resolve {host}: {err}", reason="ConnectFailed") from err
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}
    outside = sorted(str(a) for a in addresses if not any(a in net for net in allowed))
    if outside or not addresses:
        raise BackendError(
            f"endpoint {host}:{port} resolves to {', '.join(outside) or 'nothing'}, outside --allowed-endpoint-cidrs",
            reason=ENDPOINT_NOT_ALLOWED,
        )
