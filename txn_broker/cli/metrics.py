"""``txn-broker metrics``: the broker's figures in Prometheus' text format, printed once or
served at ``/metrics`` (docs/observability.md)."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from .common import Context, UsageError

#: --refresh-interval's default (txn_broker.metrics.refresh.DEFAULT_REFRESH_INTERVAL_S,
#: without importing prometheus_client for every command)
DEFAULT_REFRESH_INTERVAL_S = 15.0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    metrics = commands.add_parser(
        "metrics", parents=[common],
        help="the broker's metrics for Prometheus: print them once, or serve /metrics",
        description="Offsets and lag per partition and group, transactions by state, hanging "
                    "transactions and the gc backlog, read from the metadata database (a role with SELECT "
                    "only, txn_broker_monitor, is enough). Without --listen: print them once in "
                    "Prometheus' text format.")
    metrics.add_argument("--listen", metavar="HOST:PORT",
                         help="serve http://HOST:PORT/metrics until interrupted (port 0 picks a free one)")
    add_refresh_interval(metrics, "--listen")
    metrics.set_defaults(handler=run_metrics)


def add_refresh_interval(parser: argparse.ArgumentParser, listen_option: str) -> None:
    parser.add_argument(
        "--refresh-interval", type=_seconds, default=DEFAULT_REFRESH_INTERVAL_S, metavar="SECONDS",
        help=f"with {listen_option}: read and render the broker's figures every SECONDS in the background, "
             "and answer each scrape with the last rendering (default "
             f"{DEFAULT_REFRESH_INTERVAL_S:g}; 0: read them at every scrape, which takes about a second at "
             "10,000 partitions); docs/observability.md")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 to 86400 seconds")
    return value


def parse_address(option: str, text: str) -> tuple[str, int]:
    """(host, port) of a HOST:PORT option."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"{option} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]"), int(port_text)


def serve_exporter(broker: Any, registry: Any, option: str, address: str, refresh_interval_s: float) -> str:
    """Start serving the broker's figures and ``registry`` (the live metrics) at
    ``address`` (daemon threads), refreshed in the background every
    ``refresh_interval_s`` (0: read at every scrape); returns the URL."""
    from ..metrics import BrokerCollector, RefreshingExporter, start_metrics_server, start_refreshed_server

    host, port = parse_address(option, address)
    try:
        if refresh_interval_s > 0:
            exporter = RefreshingExporter(broker.metrics_figures, refresh_interval_s, registry)
            server, _thread = start_refreshed_server(exporter, host, port)
        else:
            registry.register(BrokerCollector.of(broker))
            server, _thread = start_metrics_server(registry, host, port)
    except OSError as error:
        raise UsageError(f"{option} {address!r}: cannot listen there: {error.strerror or error}") from None
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{server.server_port}/metrics"


def run_metrics(ctx: Context, args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry, generate_latest

    from ..metrics import broker_registry

    if not args.listen:
        sys.stdout.write(generate_latest(broker_registry(ctx.broker)).decode("utf-8"))
        return 0
    url = serve_exporter(ctx.broker, CollectorRegistry(auto_describe=False), "--listen", args.listen,
                         args.refresh_interval)
    sys.stdout.write(f"serving metrics at {url}\n")
    sys.stdout.flush()
    threading.Event().wait()  # until interrupted (Ctrl-C, SIGTERM)
    return 0
