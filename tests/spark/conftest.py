"""Fixtures of the Spark tests: one real local SparkSession for the whole session.

The session runs ``local[2, 4]``: two cores, and a failed task is tried up to 4 times (the
task-failure test needs retries). Its Python workers run this interpreter. They reach
moto's S3 server with the test credentials through ``spark.executorEnv.*`` and the
endpoint through the data source's ``s3.endpoint.url`` option, as executors on other
machines would.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from _servers import AWS_TEST_ENV


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import txn_broker.spark

    builder = (
        SparkSession.builder.master("local[2, 4]").appName("txn-broker-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
    )
    for key, value in AWS_TEST_ENV.items():
        builder = builder.config(f"spark.executorEnv.{key}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    txn_broker.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def broker(backend: Any) -> Iterator[Any]:
    with backend.connect() as b:
        yield b
