"""The exporter's background refresh (``--refresh-interval SECONDS``, default 15): a daemon
thread reads the broker's figures and renders them with prometheus_client's
``generate_latest`` every interval, and each scrape answers with the last rendering, so a
scrape costs a copy of bytes however many partitions and groups the broker has (rendering
80,000 samples takes prometheus_client most of a second).

What a scrape adds to the last rendering is rendered at scrape time, by the same
``generate_latest``, from the live registry: the listener's request counters, histograms and
connections (``serve --metrics-listen``), ``txn_broker_scrape_success`` and
``txn_broker_scrape_duration_seconds`` of the last refresh, and the refresh's own figures
(``txn_broker_exporter_*``). The answer is always the classic text format (version 0.0.4),
which Prometheus reads whatever else it offers to accept; gzipped when the scraper accepts it
(the rendering is compressed once, in the background).

The first refresh runs before the port answers. A refresh that fails keeps the last
rendering served, counts ``txn_broker_exporter_refresh_failures_total``, sets
``txn_broker_scrape_success 0`` and logs the error with its credentials masked."""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, ThreadingWSGIServer, gzip_accepted
from prometheus_client.registry import Collector

from ..redaction import redact
from .catalog import spec
from .exporter import figure_metrics
from .figures import BrokerFigures

log = logging.getLogger(__name__)

#: the default of ``--refresh-interval``: figures at most this old (plus one refresh), and
#: a refresh of a 10,000-partition broker (0.7 to 1 s of one core) every 15 s
DEFAULT_REFRESH_INTERVAL_S = 15.0
#: gzip level of the rendering: at 80,000 samples (6.5 MB) level 6 takes a quarter of level
#: 9's time (about 40 ms against 160) for a fifth more bytes (275 KB against 230)
GZIP_LEVEL = 6


@dataclass(frozen=True)
class Rendering:
    """One refresh's figures in the text format, plain and gzipped."""

    text: bytes
    gzipped: bytes


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def render(figures: BrokerFigures) -> bytes:
    """The figures' metric families in prometheus_client's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(figure_metrics(figures)))
    return generate_latest(registry)


class RefreshingExporter:
    """Reads and renders the figures every ``interval_s`` in a daemon thread
    (:meth:`start`); :meth:`answer` is what a scrape gets. ``live``: the registry rendered
    at each scrape, after the last rendering; the exporter registers its own figures there."""

    def __init__(self, read: Callable[[], BrokerFigures], interval_s: float, live: CollectorRegistry) -> None:
        if not interval_s > 0:
            raise ValueError("the refresh interval must be positive")
        self._read = read
        self.interval_s = interval_s
        self.live = live
        self._lock = threading.Lock()
        self._rendering = Rendering(b"", gzip.compress(b"", GZIP_LEVEL))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the last refresh attempt succeeded (False before the first)
        self.succeeded = False
        self.refreshes = 0
        self.failures = 0
        self.read_seconds = 0.0
        self.refresh_seconds = 0.0
        #: Unix time the last successful refresh completed (None before the first)
        self.last_refresh_at: float | None = None
        live.register(_ExporterCollector(self))

    def refresh(self) -> bool:
        """Read and render the figures now; True when it succeeded. A failure keeps the
        last rendering and is counted and logged."""
        started = time.perf_counter()
        try:
            figures = self._read()
            text = render(figures)
            rendering = Rendering(text, gzip.compress(text, GZIP_LEVEL))
        except Exception as error:  # noqa: BLE001 - any failure: keep serving the last one
            with self._lock:
                self.failures += 1
                self.succeeded = False
            log.warning("metrics: refreshing the broker's figures failed (serving those of the last refresh): "
                        "%s: %s", type(error).__name__, redact(str(error)))
            return False
        with self._lock:
            self._rendering = rendering
            self.succeeded = True
            self.refreshes += 1
            self.read_seconds = figures.read_seconds
            self.refresh_seconds = time.perf_counter() - started
            self.last_refresh_at = time.time()
        return True

    def start(self) -> None:
        """Refresh once now (a scrape never meets an empty exporter), then every interval
        in a daemon thread."""
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="txn-broker-metrics-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    def answer(self, gzipped: bool) -> bytes:
        """The body of a scrape: the last rendering, then the live registry's families."""
        with self._lock:
            rendering = self._rendering
        live = generate_latest(self.live)
        if gzipped:  # gzip members one after another are one gzip stream (RFC 1952)
            return rendering.gzipped + gzip.compress(live, GZIP_LEVEL)
        return rendering.text + live


class _ExporterCollector(Collector):
    """The refresh's own figures, read at scrape time."""

    def __init__(self, exporter: RefreshingExporter) -> None:
        self._exporter = exporter

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        e = self._exporter
        with e._lock:
            values = {
                "txn_broker_scrape_success": 1.0 if e.succeeded else 0.0,
                "txn_broker_scrape_duration_seconds": e.read_seconds,
                "txn_broker_exporter_refresh_interval_seconds": e.interval_s,
                "txn_broker_exporter_refresh_duration_seconds": e.refresh_seconds,
            }
            last, failures = e.last_refresh_at, e.failures
        for name, value in values.items():
            yield _gauge(name, value)
        if last is not None:  # absent until a refresh succeeds
            yield _gauge("txn_broker_exporter_last_refresh_timestamp_seconds", last)
        item = spec("txn_broker_exporter_refresh_failures_total")
        yield CounterMetricFamily(item.name.removesuffix("_total"), item.help, value=failures)


def _gauge(name: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, spec(name).help, value=value)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def start_refreshed_server(exporter: RefreshingExporter, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve ``exporter`` at ``http://host:port/metrics`` (any path answers, as
    prometheus_client's own server) from daemon threads; returns (server, thread). Port 0
    picks a free one: ``server.server_port``. The port is bound first (an address in use
    fails at once), then :meth:`RefreshingExporter.start` runs the first refresh, then the
    server answers: a scrape arriving meanwhile waits for it."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        gzipped = gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", ""))
        body = exporter.answer(gzipped)
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4), ("Content-Length", str(len(body)))]
        if gzipped:
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, address = infos[0]

    class Server(ThreadingWSGIServer):
        address_family = family

    server = make_server(str(address[0]), port, app, Server, handler_class=_QuietHandler)
    try:
        exporter.start()
    except BaseException:
        server.server_close()
        raise
    thread = threading.Thread(target=server.serve_forever, name="txn-broker-metrics-http", daemon=True)
    thread.start()
    return server, thread
