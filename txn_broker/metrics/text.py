"""Collecting a scrape cheaply: families with one sample per partition or per group and
partition (10,000s of samples on a large broker) are kept as columns (:class:`BulkGauge`),
the label values of a row shared by every family of the same rows, and their samples are
built only when prometheus_client's encoder asks for them. The text format itself is
always prometheus_client's own (``generate_latest``; the exporter's server is its
``start_http_server``): bench case 12 reports what its per-sample rendering costs."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.samples import Sample


class LabelRows:
    """The label values of many samples (one tuple per row, in ``names`` order), shared by
    the families that have one sample per row."""

    def __init__(self, names: Sequence[str], rows: Sequence[tuple[str, ...]]) -> None:
        self.names = list(names)
        self.rows = rows
        self._dicts: list[dict[str, str]] | None = None

    def dicts(self) -> list[dict[str, str]]:
        """The rows as the label dicts of samples, built once and shared by every family of
        these rows (prometheus_client's encoders only read them)."""
        if self._dicts is None:
            names = self.names
            self._dicts = [dict(zip(names, row, strict=True)) for row in self.rows]
        return self._dicts


class BulkGauge(GaugeMetricFamily):
    """A gauge family of one sample per row of ``labels``: its values kept as a column.
    Its ``samples`` are built when prometheus_client asks (its encoders,
    ``registry.get_sample_value``)."""

    def __init__(self, name: str, documentation: str, labels: LabelRows, values: Sequence[float]) -> None:
        super().__init__(name, documentation, labels=labels.names)
        self.label_rows = labels
        self.values = values

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        name = self.name
        return [Sample(name, labels, float(v), None, None)
                for labels, v in zip(self.label_rows.dicts(), self.values, strict=True)]

    @samples.setter
    def samples(self, _value: list[Sample]) -> None:  # Metric.__init__ sets [] first
        pass
