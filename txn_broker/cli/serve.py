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
                    "consume (read_committed) the broker's topics. Without TLS or SASL the listener "
                    "refuses any address but loopback, unless --insecure is given.")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                       help=f"address to listen on (default {DEFAULT_LISTEN}; port 0 picks a free one)")
    serve.add_argument("--advertised-host", metavar="HOST",
                       help="host name given to clients in Metadata and FindCoordinator (default: the listen host)")
    serve.add_argument("--max-request-bytes", type=non_negative_int, default=100 * 1024 * 1024, metavar="N",
                       help="larger requests close their connection (default 104857600, Kafka's)")
    serve.add_argument("--sweep-interval-ms", type=non_negative_int, default=5000, metavar="MS",
                       help="abort transactions past their timeout and complete decided ones this often "
                            "(default 5000; 0: never, leave it to `txn-broker transactions abort-expired`)")
    serve.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate chain (PEM)")
    serve.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    serve.add_argument("--sasl-users", metavar="FILE",
                       help="require SASL (PLAIN or SCRAM-SHA-256) with these credentials: one user:password a line")
    serve.add_argument("--insecure", action="store_true",
                       help="allow a non-loopback address without TLS or SASL (anyone who can reach it may "
                            "read, write and abort)")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT",
                       help="also serve Prometheus metrics at http://HOST:PORT/metrics: the broker's figures "
                            "(as `txn-broker metrics`) and the listener's requests, errors, latency, "
                            "connections (docs/observability.md)")
    serve.set_defaults(handler=run_serve)


def parse_listen(text: str, *, secured: bool = False, insecure: bool = False) -> tuple[str, int]:
    """(host, port) of ``--listen``; a non-loopback host needs TLS or SASL (``secured``)
    or ``insecure``."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host.strip("[]")
    if not (secured or insecure or _loopback(host)):
        raise UsageError(
            f"--listen {text!r} is not a loopback address: without TLS (--tls-cert/--tls-key) or SASL "
            "(--sasl-users) anyone who reaches it could read, write and abort; give one of them, or "
            "--insecure, or listen on 127.0.0.1 or ::1")
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
    from ..kafka import SaslUsers, serve, tls_context

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    tls = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    users = SaslUsers.from_file(args.sasl_users) if args.sasl_users else None
    host, port = parse_listen(args.listen, secured=tls is not None or users is not None, insecure=args.insecure)
    broker = ctx.broker
    metrics, metrics_url = None, None
    if args.metrics_listen:
        from ..metrics import ListenerMetrics, broker_registry
        from .metrics import serve_registry

        registry = broker_registry(broker)
        metrics = ListenerMetrics(registry)
        metrics_url = serve_registry(registry, "--metrics-listen", args.metrics_listen)

    def ready(server: Any) -> None:
        sys.stdout.write(f"listening on {server.host}:{server.port}"
                         f"{' (TLS)' if tls else ''}{' (SASL)' if users else ''}\n")
        if metrics_url is not None:
            sys.stdout.write(f"serving metrics at {metrics_url}\n")
        sys.stdout.flush()

    serve(broker, host, port, ready=ready, advertised_host=args.advertised_host,
          max_request_bytes=max(args.max_request_bytes, 8), sasl_users=users, tls=tls,
          sweep_interval_s=args.sweep_interval_ms / 1000, metrics=metrics)
    return 0
