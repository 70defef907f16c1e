"""web_fetch's guard: the URLs and addresses it refuses, checked before connecting and again at connect time."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable

import httpcore
import httpx

from routing.errors import ToolError

Resolver = Callable[[str, int], Awaitable[list[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


_METADATA = {
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack...
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
}
_PRIVATE = [ipaddress.ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")]
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class FetchError(ToolError):
    """web_fetch could not give a page; the message says why, for the model."""


class Refused(FetchError):
    """A URL or an address web_fetch will not go to."""


# --- addresses --------------------------------------------------------------------------------------------------------


def address_problem(address: IPAddress) -> str | None:
    """Why `address` must not be connected to ("a private address"), or None for a public address."""
    if address in _METADATA:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            problem = address_problem(embedded)
            return f"{problem} (IPv4 {embedded} inside IPv6)" if problem else None
    if address.is_loopback:
        return "a loopback address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if any(address in net for net in _PRIVATE if net.version == address.version):
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private or not address.is_global:
        return "a non-public address"
    return None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def _is_local_name(host: str) -> bool:
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


async def system_resolve(host: str, port: int) -> list[str]:
    """The host's addresses as the system resolver gives them (first answer first, without repeats)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that vets every address when it connects.

    It resolves the host itself, refuses the connection if ANY address is not public, and connects to the
    vetted IP literal, so a second DNS answer (rebinding) cannot differ from the one checked. TLS still uses
    the URL's hostname for SNI and certificate checks (httpcore passes it to start_tls).
    `allow_loopback` lets this backend connect to the literal host 127.0.0.1 (tests only).
    """

    def __init__(
        self,
        *,
        resolve: Resolver | None = None,
        allow_loopback: bool = False,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._resolve = resolve or system_resolve
        self._allow_loopback = allow_loopback
        self._inner = inner or httpcore.AnyIOBackend()

    async def vetted_addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for `host`, or Refused if any of them is not public."""
        literal = _ip_literal(host)
        if literal is not None:
            if self._allow_loopback and literal == ipaddress.IPv4Address("127.0.0.1"):
                return [str(literal)]
            problem = address_problem(literal)
            if problem:
                raise Refused(f"refused: {literal} is {problem}")
            return [str(literal)]
        if _is_local_name(host):
            raise Refused(f"refused: {host} is a local name")
        try:
            answers = await self._resolve(host, port)
        except OSError as error:
            raise httpcore.ConnectError(f"could not resolve {host}: {error}") from error
        if not answers:
            raise httpcore.ConnectError(f"could not resolve {host}: no addresses")
        vetted: list[str] = []
        for answer in answers:
            address = _ip_literal(answer)
            if address is None:
                raise Refused(f"refused: {host} resolves to {answer!r}, which is not an IP address")
            problem = address_problem(address)
            if problem:
                raise Refused(f"refused: {host} resolves to {address}, {problem}")
            vetted.append(str(address))
        return vetted

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.vetted_addresses(host, port)
        last: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last = error
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise Refused("refused: unix sockets are not reachable from web_fetch")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a connection pool that connects only through a GuardedBackend (no proxies)."""

    def __init__(self, backend: GuardedBackend, ssl_context: ssl.SSLContext) -> None:
        super().__init__(verify=ssl_context, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, max_connections=4, http1=True, http2=False, network_backend=backend
        )


def _check_url(url: httpx.URL, *, allow_loopback: bool) -> None:
    """Refuse what can be refused before connecting: other schemes, local names, non-public IP literals."""
    if url.scheme not in ("http", "https"):
        got = f"{url.scheme}://" if url.scheme else "no scheme"
        raise Refused(f"refused: only http:// and https:// URLs can be fetched (got {got})")
    host = url.raw_host.decode("ascii", errors="replace")
    if not host:
        raise Refused("refused: the URL has no host")
    if _is_local_name(host):
        raise Refused(f"refused: {host} is a local name")
    literal = _ip_literal(host)
    if literal is not None and not (allow_loopback and literal == ipaddress.IPv4Address("127.0.0.1")):
        problem = address_problem(literal)
        if problem:
            raise Refused(f"refused: {literal} is {problem}")
