"""Addresses of this host."""

from __future__ import annotations

import socket

__all__ = ["local_ip"]


def local_ip() -> str:
    """The address other hosts would reach this process at (RemotingUtil.getLocalAddress).

    A UDP "connect" sends nothing; it only asks the kernel which source address it would
    use. Falls back to 127.0.0.1 on a host without a route.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return str(ip)
    except OSError:
        pass
    return "127.0.0.1"
