"""Who may act or teach: a request with the API token, or, with none set, a client on
this machine.

A state-changing command and a label (which changes future routing) need the same
authority. With `server.api_token` set, the bearer-token middleware has already refused
every request without it, so whoever reaches an endpoint may act. With no token, only a
loopback client may: any device on the network can reach a server bound to 0.0.0.0, and
reading is all such a server promises them.

A request relayed by a proxy is not this machine's, whatever address it came from: behind
a reverse proxy on this machine every client's connection is the proxy's, from
127.0.0.1. Most proxies say they relayed it (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`,
`Via`), and such a request may not act without the token: who it speaks for is unknown.
The same headers from a client posing as a proxy (uvicorn trusts `X-Forwarded-For` from
the addresses in `FORWARDED_ALLOW_IPS`, all of them when it is `*`) cannot make a remote
client local either. A proxy that says nothing (nginx's plain `proxy_pass`) cannot be
told from a local client: such a set-up needs the token.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from starlette.types import Scope

from search.config import Config


def token_required(config: Config) -> bool:
    token = config.server.api_token
    return token is not None and bool(token.get_secret_value())


# A pure function of the text, asked on every request with the same few client addresses:
# parsing an address costs more than the rest of the check (bounded, so a client cycling
# addresses cannot grow it).
@lru_cache(maxsize=1024)
def is_loopback(host: str | None) -> bool:
    """Whether `host` is this machine: 127.0.0.0/8, ::1, or an IPv4 loopback address as a
    dual-stack socket bound to "::" reports it ("::ffff:127.0.0.1")."""
    address = _address(host)
    return address is not None and address.is_loopback


# Headers a proxy adds to a request it relays (RFC 7239 `Forwarded`, the de facto
# `X-Forwarded-*` family and `X-Real-IP`, and RFC 9110 `Via`); ASGI names are lower case.
_RELAYED_PREFIX = b"x-forwarded-"
_RELAYED = frozenset({b"forwarded", b"x-real-ip", b"via"})


def relayed(scope: Scope) -> bool:
    """Whether the request says a proxy relayed it (see the module's docstring)."""
    for name, _ in scope.get("headers", ()):
        if name in _RELAYED or name.startswith(_RELAYED_PREFIX):
            return True
    return False


def may_act(scope: Scope, config: Config) -> bool:
    """Whether the request of this ASGI scope may carry out commands and store labels: it
    carried the token, or it comes from this machine and was relayed by no proxy."""
    if token_required(config):
        return True  # the middleware let it in: it carried the token
    return is_loopback(peer(scope)) and not relayed(scope)


def _address(host: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address `host` names, an IPv4 address carried in IPv6 as itself; None if none."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


# Every loopback address, as one client: the machine the router runs on.
THIS_MACHINE = "localhost"


@lru_cache(maxsize=1024)
def client_identity(host: str | None) -> str | None:
    """Who a peer address is for what the server keeps between its requests (its
    conversations): one name for all of this machine's addresses (a client that reaches the
    server as 127.0.0.1, then as ::1, is the same), an IPv4 address the same however the
    socket reports it, an IPv6 address in its one canonical spelling."""
    address = _address(host)
    if address is None:
        return host or None
    return THIS_MACHINE if address.is_loopback else str(address)


def peer(scope: Scope) -> str | None:
    """The client's address as the server sees it (the connection's peer, without its port,
    which changes per connection): what a request's authority and its conversations are
    judged by. None over a unix socket."""
    client = scope.get("client")  # (host, port), or None (a unix socket, a test client)
    return str(client[0]) if client and client[0] else None


def open_to_network_warning(config: Config) -> str | None:
    """What `search serve` says at start when it serves beyond this machine without a token."""
    if (
        token_required(config)
        or is_loopback(config.server.host)
        or config.server.host == "localhost"
    ):
        return None
    return (
        f"serving on {config.server.host} without server.api_token: any device that reaches "
        "this address can read through the router; commands and labels are accepted only "
        "from this machine (set server.api_token to allow them from elsewhere)"
    )
