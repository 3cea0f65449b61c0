"""Publishing a task's output topics to their Iceberg tables before the task succeeds.

A task that declares ``iceberg_table_asset(topic)`` as an outlet (the operators do so for
every output they declare with ``iceberg.enabled``, see ``assets.output_assets``) calls
:func:`publish_outlet_tables` after its commit. Airflow records the table's asset event
only when the task succeeds, so a DAG scheduled on the table reads a table that already
holds the commit. Publishing is exactly once and safe next to other publishers (the
maintenance DAG, ``txn-broker iceberg run``): each snapshot holds whole transactions and
records its offsets (docs/iceberg.md). A publish that fails (an unreachable catalog, a
commit conflict: retriable broker errors) fails the task, after its commit: the retry
commits nothing twice and publishes again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .assets import iceberg_outlet_topics

if TYPE_CHECKING:
    from txn_broker import Broker

log = logging.getLogger(__name__)


def publish_outlet_tables(broker: Broker, outlets: list[Any], txn_broker_conn_id: str) -> list[dict[str, Any]]:
    """Publish the topics whose table Assets are among ``outlets``; returns, per table, what
    the publish did (JSON-able, for the task's XCom). InvalidConfigError when such a topic
    does not have ``iceberg.enabled``."""
    topics = iceberg_outlet_topics(list(outlets or []), txn_broker_conn_id)
    if not topics:
        return []
    done = []
    for published in broker.publish_iceberg(topics):
        log.info("published %s to %s: %d row(s), snapshot %s", published.topic, published.table, published.rows,
                 published.snapshot_id)
        done.append({"topic": published.topic, "table": published.table, "snapshot_id": published.snapshot_id,
                     "rows": published.rows, "offsets": {str(p): o for p, o in sorted(published.offsets.items())}})
    return done
