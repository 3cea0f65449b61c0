"""``txn-broker serve``: the Kafka-protocol listener (docs/kafka-protocol.md)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import Any

from .common import Context, UsageError, non_negative_int, positive_int
from .metrics import add_refresh_interval

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
    # (defaults: txn_broker/kafka/limits.py, imported only when serving)
    serve.add_argument("--max-queued-request-bytes", type=non_negative_int, metavar="N",
                       help="bytes of requests being read across all connections; past it, connections wait "
                            "to be read (default 268435456; at least --max-request-bytes)")
    serve.add_argument("--max-connections", type=non_negative_int, metavar="N",
                       help="connections past this many are closed at once (default 4096)")
    serve.add_argument("--max-connections-per-ip", type=non_negative_int, metavar="N",
                       help="connections from one address past this many are closed at once (default 1024)")
    serve.add_argument("--frame-stall-timeout-ms", type=non_negative_int, metavar="MS",
                       help="a request whose bytes stop arriving this long closes its connection "
                            "(default 5000; a whole request has 30 s)")
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
    serve.add_argument("--super-users", metavar="PRINCIPALS", default="",
                       help="principals that may do everything whatever the ACLs, e.g. User:admin,User:ops "
                            "(Kafka's super.users)")
    serve.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                       help="with SASL, allow a request on a resource no ACL names (default: refused, as Kafka "
                            "with an authoriser); see `txn-broker acls`")
    serve.add_argument("--auto-create-topics", action="store_true",
                       help="create a topic a client asks Metadata for and that does not exist, with Kafka's "
                            "record shape and --default-partitions (Kafka's auto.create.topics.enable; "
                            "default off)")
    serve.add_argument("--default-partitions", type=positive_int, default=1, metavar="N",
                       help="partitions of an automatically created topic (Kafka's num.partitions; default 1)")
    serve.add_argument("--fetch-session-cache-slots", type=non_negative_int, default=1000, metavar="N",
                       help="fetch sessions (KIP-227) kept, least recently used evicted first (Kafka's "
                            "max.incremental.fetch.session.cache.slots; default 1000; 0: none)")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT",
                       help="also serve Prometheus metrics at http://HOST:PORT/metrics: the broker's figures "
                            "(as `txn-broker metrics`) and the listener's requests, errors, latency, "
                            "connections (docs/observability.md)")
    add_refresh_interval(serve, "--metrics-listen")
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
    from ..kafka import ListenerLimits, SaslUsers, serve, tls_context

    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    tls = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    users = SaslUsers.from_file(args.sasl_users) if args.sasl_users else None
    limits = listener_limits(args, ListenerLimits)
    host, port = parse_listen(args.listen, secured=tls is not None or users is not None, insecure=args.insecure)
    broker = ctx.broker
    metrics, metrics_url = None, None
    if args.metrics_listen:
        from prometheus_client import CollectorRegistry

        from ..metrics import ListenerMetrics
        from .metrics import serve_exporter

        registry = CollectorRegistry(auto_describe=False)
        metrics = ListenerMetrics(registry)
        metrics_url = serve_exporter(broker, registry, "--metrics-listen", args.metrics_listen,
                                     args.refresh_interval)

    def ready(server: Any) -> None:
        sys.stdout.write(f"listening on {server.host}:{server.port}"
                         f"{' (TLS)' if tls else ''}{' (SASL)' if users else ''}\n")
        if metrics_url is not None:
            sys.stdout.write(f"serving metrics at {metrics_url}\n")
        sys.stdout.flush()

    serve(broker, host, port, ready=ready, advertised_host=args.advertised_host,
          max_request_bytes=max(args.max_request_bytes, 8), sasl_users=users, tls=tls,
          sweep_interval_s=args.sweep_interval_ms / 1000, limits=limits,
          auto_create_topics=args.default_partitions if args.auto_create_topics else 0, metrics=metrics,
          super_users=[u.strip() for u in args.super_users.split(",") if u.strip()],
          allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
          fetch_session_slots=args.fetch_session_cache_slots)
    return 0


def listener_limits(args: argparse.Namespace, limits_class: Any) -> Any:
    """The ListenerLimits of the command line: each option given replaces its default."""
    defaults = limits_class()
    queued = args.max_queued_request_bytes
    if queued is None:
        queued = max(defaults.max_queued_request_bytes, args.max_request_bytes)
    if queued < args.max_request_bytes:
        raise UsageError(f"--max-queued-request-bytes {queued} is less than --max-request-bytes "
                         f"{args.max_request_bytes}: the largest request could never be read")
    stall_ms = args.frame_stall_timeout_ms
    return limits_class(
        max_queued_request_bytes=queued,
        max_connections=max(args.max_connections or defaults.max_connections, 1),
        max_connections_per_ip=max(args.max_connections_per_ip or defaults.max_connections_per_ip, 1),
        frame_stall_timeout_s=defaults.frame_stall_timeout_s if stall_ms is None else max(stall_ms, 1) / 1000)
