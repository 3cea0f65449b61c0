"""A task's declared topics (``topics=[TopicSpec(...)]``) on deploy: created when missing,
evolved when the declaration changed within the topic's rules (recorded as made by the
task), refused with a typed error naming the field and rule when it cannot be, changing
nothing. ``set_up_topics`` is what the ingest and Spark operators run first."""

from __future__ import annotations

import pyarrow as pa
import pytest
from txn_broker_airflow.topic_setup import set_up_topics

from txn_broker import TopicSpec
from txn_broker.errors import IncompatibleSchemaError, InvalidPartitionsError

V1 = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("amount", pa.int32())])
V2 = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("amount", pa.int64()),
                pa.field("currency", pa.string())])


def test_declared_topics_are_created_then_evolved_on_deploy(backend):
    broker = backend.connect()
    assert set_up_topics(broker, [TopicSpec("orders", 2, V1)], ["orders"], "ingest", "c") == {"orders": "created"}
    assert set_up_topics(broker, [TopicSpec("orders", 2, V1)], ["orders"], "ingest", "c") == {"orders": "exists"}
    # the DAG's next version widens a column, adds one and a partition
    assert set_up_topics(broker, [TopicSpec("orders", 3, V2)], ["orders"], "ingest", "c") == {"orders": "evolved"}
    described = broker.describe_topic("orders")
    assert described.schema.remove_metadata().equals(V2) and len(described.partitions) == 3
    assert broker.topic_alterations("orders")[-1]["altered_by"] == "airflow:ingest"

    narrowed = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("amount", pa.int32()),
                          pa.field("currency", pa.string())])
    with pytest.raises(IncompatibleSchemaError) as refused:
        set_up_topics(broker, [TopicSpec("orders", 3, narrowed)], ["orders"], "ingest", "c")
    assert refused.value.field == "amount"
    with pytest.raises(InvalidPartitionsError):
        set_up_topics(broker, [TopicSpec("orders", 2, V2)], ["orders"], "ingest", "c")
    after = broker.describe_topic("orders")
    assert after.schema.remove_metadata().equals(V2) and len(after.partitions) == 3  # nothing changed
    broker.close()
