"""Rendering a scrape fast: families with one sample per partition or per group and
partition (10,000s of samples on a large broker) are kept as columns
(:class:`BulkGauge`) and written to Prometheus' text format without building a sample
object per row, the label text of a row built once and shared by every family of the
same rows. :func:`render_text` gives exactly the bytes of prometheus_client's
``generate_latest`` (tests/observability check that, escaping included): the header
lines and every other family are prometheus_client's own rendering, and a bulk family's
sample lines follow its rules (labels sorted by name, values by its ``floatToGoString``).
prometheus_client's per-sample rendering cost about 15 µs a sample, most of a
10,000-partition scrape (bench case 12).

:func:`start_metrics_server` serves ``/metrics`` this way with prometheus_client's own
WSGI server classes, always in the text format (version 0.0.4, which Prometheus reads
whatever it asks for first), gzipped when the scraper accepts it."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, ThreadingWSGIServer, _get_best_family, _SilentHandler
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class LabelRows:
    """The label values of many samples (one tuple per row, in ``names`` order), shared by
    the families that have one sample per row; their text is built once, on first use."""

    def __init__(self, names: Sequence[str], rows: Sequence[tuple[str, ...]]) -> None:
        self.names = list(names)
        self.rows = rows
        self._text: list[str] | None = None
        self._lock = threading.Lock()

    def text(self) -> list[str]:
        """Each row's ``{name="value",...}``, names sorted (as prometheus_client writes them)."""
        with self._lock:
            if self._text is None:
                order = sorted(range(len(self.names)), key=lambda i: self.names[i])
                escaped: dict[str, str] = {}

                def esc(v: str) -> str:
                    out = escaped.get(v)
                    if out is None:
                        out = escaped[v] = _escape(v)
                    return out

                self._text = ["{" + ",".join(f'{self.names[i]}="{esc(row[i])}"' for i in order) + "}"
                              for row in self.rows]
            return self._text


class BulkGauge(GaugeMetricFamily):
    """A gauge family of one sample per row of ``labels``: its values kept as a column.
    Its ``samples`` are built only when something other than :func:`render_text` asks
    (prometheus_client's encoders, ``registry.get_sample_value``)."""

    def __init__(self, name: str, documentation: str, labels: LabelRows, values: Sequence[float]) -> None:
        super().__init__(name, documentation, labels=labels.names)
        self.label_rows = labels
        self.values = values

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        names = self.label_rows.names
        return [Sample(self.name, dict(zip(names, row, strict=True)), float(v), None, None)
                for row, v in zip(self.label_rows.rows, self.values, strict=True)]

    @samples.setter
    def samples(self, _value: list[Sample]) -> None:  # Metric.__init__ sets [] first
        pass

    def header(self) -> bytes:
        return generate_latest(_Fixed([GaugeMetricFamily(self.name, self.documentation, labels=self.label_rows.names)]))

    def sample_lines(self) -> str:
        name = self.name
        return "".join(f"{name}{labels} {floatToGoString(v)}\n"
                       for labels, v in zip(self.label_rows.text(), self.values, strict=True))


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def render_text(registry: Collector) -> bytes:
    """What ``prometheus_client.generate_latest(registry)`` gives, fast for bulk families."""
    out: list[bytes] = []
    for metric in registry.collect():
        if isinstance(metric, BulkGauge):
            out.append(metric.header())
            out.append(metric.sample_lines().encode("utf-8"))
        else:
            out.append(generate_latest(_Fixed([metric])))
    return b"".join(out)


def metrics_app(registry: CollectorRegistry) -> Callable[..., list[bytes]]:
    """A WSGI app answering every GET with the registry's metrics (:func:`render_text`)."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        method = environ["REQUEST_METHOD"]
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET")])
            return [f"# HTTP 405: {method}; use GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        body = render_text(registry)
        headers = [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)]
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            body = gzip.compress(body, compresslevel=1)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [body]

    return app


def start_metrics_server(registry: CollectorRegistry, host: str, port: int) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread; returns
    (server, thread). Port 0 picks a free one: ``server.server_port``."""
    class Server(ThreadingWSGIServer):
        pass

    Server.address_family, host = _get_best_family(host, port)
    httpd = make_server(host, port, metrics_app(registry), Server, handler_class=_SilentHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="txn-broker-metrics")
    thread.start()
    return httpd, thread
