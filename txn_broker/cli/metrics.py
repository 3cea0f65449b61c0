"""``txn-broker metrics``: the broker's figures in Prometheus' text format, printed once or
served at ``/metrics`` (docs/observability.md)."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from .common import Context, UsageError


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    metrics = commands.add_parser(
        "metrics", parents=[common],
        help="the broker's metrics for Prometheus: print them once, or serve /metrics",
        description="Offsets and lag per partition and group, transactions by state, hanging "
                    "transactions and the gc backlog, read from the metadata database at each scrape "
                    "(a role with SELECT only, txn_broker_monitor, is enough). Without --listen: print "
                    "them once in Prometheus' text format.")
    metrics.add_argument("--listen", metavar="HOST:PORT",
                         help="serve http://HOST:PORT/metrics until interrupted (port 0 picks a free one)")
    metrics.set_defaults(handler=run_metrics)


def parse_address(option: str, text: str) -> tuple[str, int]:
    """(host, port) of a HOST:PORT option."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"{option} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]"), int(port_text)


def serve_registry(registry: Any, option: str, address: str) -> str:
    """Start serving ``registry`` at ``address`` (a daemon thread); returns its URL."""
    from ..metrics import start_metrics_server

    host, port = parse_address(option, address)
    try:
        server, _thread = start_metrics_server(registry, host, port)
    except OSError as error:
        raise UsageError(f"{option} {address!r}: cannot listen there: {error.strerror or error}") from None
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{server.server_port}/metrics"


def run_metrics(ctx: Context, args: argparse.Namespace) -> int:
    from prometheus_client import generate_latest

    from ..metrics import broker_registry

    registry = broker_registry(ctx.broker)
    if not args.listen:
        sys.stdout.write(generate_latest(registry).decode("utf-8"))
        return 0
    url = serve_registry(registry, "--listen", args.listen)
    sys.stdout.write(f"serving metrics at {url}\n")
    sys.stdout.flush()
    threading.Event().wait()  # until interrupted (Ctrl-C, SIGTERM)
    return 0
