"""Refuse, and record, every attempt to reach a machine other than this one: Python-level TCP connects, UDP
sends and name lookups (``socket.socket.connect``/``connect_ex``/``sendto``, ``socket.getaddrinfo``; what
``socket.create_connection``, urllib, requests and httpx use). Allowed: loopback (127.0.0.0/8, ::1), Unix
sockets, and lookups of ``localhost``, of this machine's own name and of address literals (the address is then
checked when connecting). A UDP ``connect`` sends nothing (Ray uses one to find its own address) and is allowed.

What it cannot see: sockets opened by C or C++ code that does not go through Python's ``socket`` module
(gRPC's core, Ray's core workers) and processes that do not load it (the tests start Flower's processes with
``sitecustomize`` installing it, and with Flower's telemetry and update check off by environment)."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys

_ORIGINAL = {"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex,
             "sendto": socket.socket.sendto, "getaddrinfo": socket.getaddrinfo}
attempts: list[str] = []
_log: str | None = None


#: The one attempt the tests accept, as the guard logs it: Ray 2.55's dashboard process (started by every
#: ``ray.init`` and ``ray start --head``, also with ``include_dashboard=False``, which then loads only its
#: usage-stats module) asks the link-local cloud metadata service which cloud it runs on, even with
#: ``RAY_USAGE_STATS_ENABLED=0`` (ray/dashboard/modules/usage_stats/usage_stats_head.py, UsageStatsHead.run, calls
#: ray/_common/usage/usage_lib.py's get_cluster_config_to_report, hence get_cloud_from_metadata_requests, before
#: it checks the switch). No environment variable or ray.init argument turns it off; the guard refuses it and Ray
#: records the cloud as "unknown" (docs/flower.md, "No phoning home").
RAY_CLOUD_PROBE = re.compile(r"^(connect to \('169\.254\.169\.254', 80\)|name lookup of 'metadata\.google\.internal') \(pid \d+, dashboard\.py\)$")


def unexplained(lines: list[str]) -> list[str]:
    """The logged attempts other than Ray's dashboard's cloud-metadata probe (:data:`RAY_CLOUD_PROBE`)."""
    return [line for line in lines if not RAY_CLOUD_PROBE.match(line)]


class OutboundBlocked(ConnectionRefusedError):
    """An attempt to reach another machine, refused by the tests' guard."""


def is_local(host: object) -> bool:
    """Loopback addresses, ``localhost`` and this machine's name; False for any other name or address."""
    if host is None or host in ("", "localhost", socket.gethostname()):
        return True
    try:
        address = ipaddress.ip_address(str(host).split("%")[0])
    except ValueError:
        return False
    return address.is_loopback


def is_literal(host: object) -> bool:
    try:
        ipaddress.ip_address(str(host).split("%")[0])
        return True
    except ValueError:
        return False


def _refuse(what: str) -> None:
    line = f"{what} (pid {os.getpid()}, {os.path.basename(sys.argv[0]) if sys.argv else '?'})"
    attempts.append(line)
    if _log:
        with open(_log, "a") as f:
            f.write(line + "\n")
    raise OutboundBlocked(f"outbound connection blocked by the tests: {what}")


def _target(sock: socket.socket, address: object) -> object | None:
    """The host of an internet address, None for others (Unix sockets)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
        return address[0]
    return None


def _connect(self, address):
    host = _target(self, address)
    if host is not None and self.type == socket.SOCK_STREAM and not is_local(host):
        _refuse(f"connect to {address!r}")
    return _ORIGINAL["connect"](self, address)


def _connect_ex(self, address):
    host = _target(self, address)
    if host is not None and self.type == socket.SOCK_STREAM and not is_local(host):
        _refuse(f"connect_ex to {address!r}")
    return _ORIGINAL["connect_ex"](self, address)


def _sendto(self, data, *args):
    address = args[-1]
    host = _target(self, address)
    if host is not None and not is_local(host):
        _refuse(f"sendto {address!r}")
    return _ORIGINAL["sendto"](self, data, *args)


def _getaddrinfo(host, *args, **kwargs):
    if isinstance(host, bytes):
        host = host.decode(errors="replace")
    if not (is_local(host) or is_literal(host)):
        _refuse(f"name lookup of {host!r}")
    return _ORIGINAL["getaddrinfo"](host, *args, **kwargs)


def install(log: str | None = None) -> None:
    """Patch Python's socket layer in this process (``log``: also append each refused attempt to that file)."""
    global _log
    _log = log
    socket.socket.connect, socket.socket.connect_ex, socket.socket.sendto = _connect, _connect_ex, _sendto
    socket.getaddrinfo = _getaddrinfo


def uninstall() -> None:
    socket.socket.connect, socket.socket.connect_ex = _ORIGINAL["connect"], _ORIGINAL["connect_ex"]
    socket.socket.sendto, socket.getaddrinfo = _ORIGINAL["sendto"], _ORIGINAL["getaddrinfo"]
