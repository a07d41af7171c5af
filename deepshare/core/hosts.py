"""Whether an HTTP ``Host`` header names a service: the check behind the HTTP services' refusal of
other hosts (DNS rebinding: a web page whose own name resolves to the service's address would
otherwise read it in the user's browser). Pure, so every layer's endpoint uses the same rule:
:class:`deepshare.infra.httpauth.AllowHosts` (the ASGI services) and the node agents' metrics
endpoint (:mod:`deepshare.agents.exporter`, WSGI)."""

from __future__ import annotations

import ipaddress
from typing import Iterable


def host_name(value: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:8470`` -> ``::1``, ``a.b:80`` -> ``a.b``, and a
    fully qualified name's final dot dropped (``localhost.`` names ``localhost``, as DNS reads it)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value[:-1] if value.endswith(".") and not value.endswith("..") else value


def is_host_name(value: object) -> bool:
    """A name a ``Host`` header can give, as a service's allowed names are written: 1-253
    printable characters without spaces or ``/``."""
    return (isinstance(value, str) and 0 < len(value) <= 253 and value.isprintable()
            and not any(ch.isspace() or ch == "/" for ch in value))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostNames:
    """The ``Host`` names a service bound to ``bound_host`` answers: ``localhost`` and loopback
    IPs, the bound address, the names in ``allowed``, and, when bound to a non-loopback address,
    any IP literal (an IP cannot be a rebinding name)."""

    def __init__(self, bound_host: str, allowed: Iterable[str] = ()) -> None:
        bound = host_name(bound_host)
        self.names = {"localhost", bound, *(host_name(a) for a in allowed if a.strip())}
        self.any_ip = not is_loopback(bound)

    def allows(self, host: str) -> bool:
        name = host_name(host)
        return bool(name) and (name in self.names or is_loopback(name) or (self.any_ip and is_ip(name)))
