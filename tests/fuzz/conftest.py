"""Fixtures of the fuzz tier: a fresh broker per property and backend (Hypothesis examples
share it and use unique topic names), and fsck after every property."""

from __future__ import annotations

import itertools
import uuid

import pytest

_names = itertools.count()


def unique(prefix: str = "f") -> str:
    """A topic name no other example used."""
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(params=["sqlite", "postgres"])
def broker(request, tmp_path, monkeypatch):
    """A fresh broker for one property; fsck must be clean after the property ran."""
    import txn_broker

    name = None
    if request.param == "sqlite":
        broker = txn_broker.connect(f"sqlite:///{tmp_path}/broker.db", (tmp_path / "segments").as_uri())
    else:
        pg = request.getfixturevalue("pg_server")
        s3 = request.getfixturevalue("s3_server")
        template = request.getfixturevalue("pg_template")
        name = f"fuzz_{uuid.uuid4().hex[:10]}"
        url = pg.new_database(name, template=template)
        monkeypatch.setenv("TXN_BROKER_S3_ENDPOINT_URL", s3.endpoint_url)
        broker = txn_broker.connect(url, f"s3://{s3.new_bucket()}/segments")
    try:
        yield broker
        report = broker.fsck()
        assert report.ok, [f.message for f in report.problems][:10]
    finally:
        broker.close()
        if name is not None:
            request.getfixturevalue("pg_server").drop_database(name)
