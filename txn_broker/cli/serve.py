"""``txn-broker serve``: the Kafka-protocol listener (docs/kafka-protocol.md)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import Any

from .common import Context, UsageError, non_negative_int

DEFAULT_LISTEN = "127.0.0.1:9092"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    serve = commands.add_parser(
        "serve", parents=[common],
        help="listen for Kafka clients (Kafka's protocol) in front of this broker",
        description="Serve Kafka's protocol: Kafka clients produce (idempotent, transactional) and "
                    "consume (read_committed) the broker's topics. Loopback addresses only: TLS and "
                    "SASL are not implemented, so the listener refuses to be reachable from other hosts.")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                       help=f"address to listen on (default {DEFAULT_LISTEN}; port 0 picks a free one)")
    serve.add_argument("--advertised-host", metavar="HOST",
                       help="host name given to clients in Metadata and FindCoordinator (default: the listen host)")
    serve.add_argument("--max-request-bytes", type=non_negative_int, default=100 * 1024 * 1024, metavar="N",
                       help="larger requests close their connection (default 104857600, Kafka's)")
    serve.set_defaults(handler=run_serve)


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]")
    if not _loopback(host):
        raise UsageError(
            f"--listen {text!r} is not a loopback address: without TLS and SASL (not implemented yet) the "
            "listener would accept anyone; listen on 127.0.0.1 or ::1")
    return host, int(port_text)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def run_serve(ctx: Context, args: argparse.Namespace) -> int:
    from ..kafka import serve

    host, port = parse_listen(args.listen)
    broker = ctx.broker

    def ready(server: Any) -> None:
        sys.stdout.write(f"listening on {server.host}:{server.port}\n")
        sys.stdout.flush()

    serve(broker, host, port, ready=ready, advertised_host=args.advertised_host,
          max_request_bytes=max(args.max_request_bytes, 8))
    return 0
