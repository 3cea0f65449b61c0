"""Airflow Assets that stand for topics, so DAGs can be scheduled on data.

``topic_asset("orders_clean")`` is ``Asset("txn-topic://txn_broker_default/orders_clean")``:
the operators that commit into a topic declare it as an outlet, and a DAG with
``schedule=[topic_asset("orders_clean")]`` runs after each such commit. (The scheme is
``txn-topic``, not ``txn_topic``: an underscore is not allowed in a URI scheme, and Airflow
would then treat the whole string as an opaque name.)

The provider registers the scheme with Airflow (``provider_info.py``, ``asset-uris``):
:func:`sanitize_uri` rejects a malformed ``txn-topic`` URI where the Asset is declared,
and :func:`create_asset` is the factory Airflow's hook-lineage collector calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher

from txn_broker import validate_topic_name

from .hooks.txn_broker import DEFAULT_CONN_ID
from .provider_info import ASSET_SCHEME

if TYPE_CHECKING:
    from urllib.parse import SplitResult

SCHEME = ASSET_SCHEME
#: the scheme of assets watched by the committed-records event trigger
COMMITTED_SCHEME = "txn-committed"


def topic_asset(topic: str, txn_broker_conn_id: str = DEFAULT_CONN_ID,
                extra: dict[str, Any] | None = None) -> Asset:
    """The Asset of ``topic`` on the broker of ``txn_broker_conn_id``."""
    validate_topic_name(topic)
    return Asset(uri=f"{SCHEME}://{txn_broker_conn_id}/{topic}", group="txn_topic", extra=extra or {})


def create_asset(*, topic: str, txn_broker_conn_id: str = DEFAULT_CONN_ID,
                 extra: dict[str, Any] | None = None) -> Asset:
    """Airflow's asset factory for the ``txn-topic`` scheme (same as :func:`topic_asset`)."""
    return topic_asset(topic, txn_broker_conn_id, extra)


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Airflow's URI handler for ``txn-topic``: ``txn-topic://<connection id>/<topic>``, one
    valid topic name and no query. Raises ValueError (Airflow reports it where the Asset
    is declared) rather than let a typo become an Asset nothing ever updates."""
    topic = uri.path.lstrip("/")
    if not uri.netloc:
        raise ValueError(f"a {SCHEME} URI names a connection: {SCHEME}://<conn id>/<topic>, not {uri.geturl()!r}")
    if not topic or "/" in topic:
        raise ValueError(f"a {SCHEME} URI names one topic: {SCHEME}://<conn id>/<topic>, not {uri.geturl()!r}")
    if uri.query:
        raise ValueError(f"a {SCHEME} URI takes no query: {uri.geturl()!r}")
    validate_topic_name(topic)
    return uri


def committed_records_asset(topics: list[str] | tuple[str, ...], group_id: str,
                            txn_broker_conn_id: str = DEFAULT_CONN_ID, poll_interval: float = 5.0) -> Asset:
    """An Asset that gets an event whenever committed records appear on ``topics`` past
    ``group_id``'s committed offsets (``CommittedRecordsEventTrigger``): schedule a DAG on it
    and let its task process the ranges (``event_ranges.process_ranges``) for ``group_id``.
    URI ``txn-committed://<conn>/<topic>[,<topic>...]/<group>``: distinct from the topics'
    own ``txn-topic`` assets, so a producing task's outlet event never starts the DAG."""
    from .triggers.committed_records import CommittedRecordsEventTrigger

    names = [validate_topic_name(t) for t in topics]
    trigger = CommittedRecordsEventTrigger(topics=names, group_id=group_id, txn_broker_conn_id=txn_broker_conn_id,
                                           poll_interval=poll_interval)
    joined = ",".join(names)
    return Asset(uri=f"{COMMITTED_SCHEME}://{txn_broker_conn_id}/{joined}/{group_id}", group="txn_topic",
                 watchers=[AssetWatcher(name=f"{group_id}.committed", trigger=trigger)])
