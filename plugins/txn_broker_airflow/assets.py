"""Airflow Assets that stand for topics, so DAGs can be scheduled on data.

``topic_asset("orders_clean")`` is ``Asset("txn-topic://txn_broker_default/orders_clean")``:
the operators that commit into a topic declare it as an outlet, and a DAG with
``schedule=[topic_asset("orders_clean")]`` runs after each such commit. (The scheme is
``txn-topic``, not ``txn_topic``: an underscore is not allowed in a URI scheme, and Airflow
would then treat the whole string as an opaque name.)

The provider registers the scheme with Airflow (``provider_info.py``, ``asset-uris``):
:func:`sanitize_uri` rejects a malformed ``txn-topic`` URI where the Asset is declared,
and :func:`create_asset` is the factory Airflow's hook-lineage collector calls.

``iceberg_table_asset("revenue_daily")`` is ``Asset("txn-iceberg://txn_broker_default/revenue_daily")``:
the Iceberg table of an ``iceberg.enabled`` topic (docs/iceberg.md). A task that declares it
as an outlet publishes the topic to its table after committing (``table_publishing.py``),
so the asset event means the table holds the task's commit, and a DAG with
``schedule=[iceberg_table_asset("revenue_daily")]`` reads a table that holds it. The URI
names the connection and the topic, as ``txn-topic`` does: which catalog and namespace hold
the table is the broker's setting, not known where a DAG file is parsed, and the default
catalog's name (``txn_broker``) is the same for every broker, so it would not tell two
brokers' tables apart. ``iceberg`` is left to whichever provider owns that scheme.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, AssetWatcher

from txn_broker import validate_topic_name
from txn_broker.errors import InvalidTopicNameError

from .hooks.txn_broker import DEFAULT_CONN_ID
from .provider_info import ASSET_SCHEME, ICEBERG_ASSET_SCHEME

if TYPE_CHECKING:
    from urllib.parse import SplitResult

    from txn_broker import TopicSpec

SCHEME = ASSET_SCHEME
#: the scheme of the Iceberg tables of ``iceberg.enabled`` topics
ICEBERG_SCHEME = ICEBERG_ASSET_SCHEME
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
    """Airflow's URI handler for ``txn-topic`` and ``txn-iceberg``:
    ``<scheme>://<connection id>/<topic>``, one valid topic name and no query. Raises
    ValueError (Airflow reports it where the Asset is declared) rather than let a typo
    become an Asset nothing ever updates."""
    scheme = uri.scheme
    topic = uri.path.lstrip("/")
    if not uri.netloc:
        raise ValueError(f"a {scheme} URI names a connection: {scheme}://<conn id>/<topic>, not {uri.geturl()!r}")
    if not topic or "/" in topic:
        raise ValueError(f"a {scheme} URI names one topic: {scheme}://<conn id>/<topic>, not {uri.geturl()!r}")
    if uri.query:
        raise ValueError(f"a {scheme} URI takes no query: {uri.geturl()!r}")
    try:
        validate_topic_name(topic)
    except InvalidTopicNameError as error:
        raise ValueError(f"a {scheme} URI names a valid topic: {error}") from None
    return uri


def iceberg_table_asset(topic: str, txn_broker_conn_id: str = DEFAULT_CONN_ID,
                        extra: dict[str, Any] | None = None) -> Asset:
    """The Asset of the Iceberg table of ``topic`` (an ``iceberg.enabled`` topic) on the
    broker of ``txn_broker_conn_id``: ``txn-iceberg://<conn id>/<topic>``."""
    validate_topic_name(topic)
    return Asset(uri=f"{ICEBERG_SCHEME}://{txn_broker_conn_id}/{topic}", group="iceberg", extra=extra or {})


def create_iceberg_asset(*, topic: str, txn_broker_conn_id: str = DEFAULT_CONN_ID,
                         extra: dict[str, Any] | None = None) -> Asset:
    """Airflow's asset factory for the ``txn-iceberg`` scheme (same as :func:`iceberg_table_asset`)."""
    return iceberg_table_asset(topic, txn_broker_conn_id, extra)


def output_assets(outputs: list[str], declared: list[TopicSpec], txn_broker_conn_id: str) -> list[Asset]:
    """The outlets of a task that commits into ``outputs``: each topic's Asset, and the
    table's Asset for each output the task declares (``topics=``) with ``iceberg.enabled``."""
    iceberg = {s.name for s in declared if iceberg_declared(s)}
    assets = [topic_asset(t, txn_broker_conn_id) for t in outputs]
    return assets + [iceberg_table_asset(t, txn_broker_conn_id) for t in outputs if t in iceberg]


def iceberg_declared(spec: TopicSpec) -> bool:
    """Whether a declared topic's config turns ``iceberg.enabled`` on."""
    value = (spec.config or {}).get("iceberg.enabled")
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def iceberg_outlet_topics(outlets: list[Any], txn_broker_conn_id: str) -> list[str]:
    """The topics whose table Assets (on ``txn_broker_conn_id``) are among ``outlets``."""
    prefix = f"{ICEBERG_SCHEME}://{txn_broker_conn_id}/"
    return [o.uri[len(prefix):] for o in outlets if isinstance(getattr(o, "uri", None), str)
            and o.uri.startswith(prefix)]


def committed_records_asset(topics: list[str] | tuple[str, ...], group_id: str,
                            txn_broker_conn_id: str = DEFAULT_CONN_ID, poll_interval: float = 5.0,
                            reannounce_after: float = 60.0) -> Asset:
    """An Asset that gets an event whenever committed records appear on ``topics`` past
    ``group_id``'s committed offsets (``CommittedRecordsEventTrigger``): schedule a DAG on it
    and let its task process the ranges (``event_ranges.process_ranges``) for ``group_id``.
    URI ``txn-committed://<conn>/<topic>[,<topic>...]/<group>``: distinct from the topics'
    own ``txn-topic`` assets, so a producing task's outlet event never starts the DAG.
    ``reannounce_after``: see the trigger's "Re-announcing" (seconds; 0 turns it off)."""
    from .triggers.committed_records import CommittedRecordsEventTrigger

    names = [validate_topic_name(t) for t in topics]
    trigger = CommittedRecordsEventTrigger(topics=names, group_id=group_id, txn_broker_conn_id=txn_broker_conn_id,
                                           poll_interval=poll_interval, reannounce_after=reannounce_after)
    joined = ",".join(names)
    return Asset(uri=f"{COMMITTED_SCHEME}://{txn_broker_conn_id}/{joined}/{group_id}", group="txn_topic",
                 watchers=[AssetWatcher(name=f"{group_id}.committed", trigger=trigger)])
