"""The Broker: one handle on the metadata database and the object store, from which
topics are managed, producers and consumers made, and the coordinator administered.

The Broker is the public admin surface (docs/api.md): the CLI, the Airflow plugins, the
DAGs and the Spark apps call its methods, never its database, store, topic cache or
coordinator directly."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .compaction import CompactionReport, compact
from .config import Settings, resolve_database_url, resolve_storage_url
from .consumer import DEFAULT_METADATA_MAX_AGE_MS, Consumer, commit_offsets, committed_offsets
from .coordinator import Coordinator, SweepAction
from .database import Database, Tx
from .errors import (
    IncompatibleSchemaError,
    InvalidConfigError,
    InvalidInputError,
    SchemaMismatchError,
    StorageUnavailableError,
    TopicAlreadyExistsError,
    TxnBrokerError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
    UnknownTransactionalIdError,
)
from .fsck import FsckReport, check
from .gc import DEFAULT_DELETE_DELAY_MS, GcReport, collect_garbage
from .iceberg.settings import IcebergSettings
from .log.appends import segment_registered
from .log.batches import DEFAULT_SCHEMA
from .log.partition import (
    READ_COMMITTED,
    PartitionOffsets,
    check_offset,
    first_segment_at_time,
    partition_offsets,
)
from .log.projection import declared_default
from .log.record_deletion import delete_records
from .migrations import latest_version, pending, require_current, upgrade, upgrade_db
from .models import (
    GroupDescription,
    GroupPartition,
    HangingTransaction,
    OffsetAndMetadata,
    SchemaUpgrade,
    StateChange,
    TopicDescription,
    TopicPartition,
    TopicSpec,
    TransactionDescription,
    TransactionSummary,
    TxnPartition,
)
from .names import validate_id, validate_partition
from .producer import Producer
from .redaction import mask_url, strip_userinfo
from .states import TxnState
from .storage import ObjectStore, open_store
from .topic_configs import check_changes
from .topics import TopicMeta, Topics

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from .iceberg.publisher import Publisher, TopicPublish
    from .iceberg.status import TableStatus
    from .metrics.figures import BrokerFigures, OutcomeTally

#: a callback that receives one line of progress at a time (e.g. to show on a terminal)
Progress = Callable[[str], None]

log = logging.getLogger(__name__)


def connect(database_url: str | None = None, storage_url: str | None = None, *,
            storage_options: Mapping[str, str | None] | None = None,
            iceberg_catalog: Mapping[str, str] | None = None, iceberg_namespace: str | None = None,
            **settings: Any) -> Broker:
    """Open a broker. Without arguments: ``TXN_BROKER_DATABASE_URL`` and
    ``TXN_BROKER_STORAGE_URL``, else the embedded default (SQLite + a local directory
    under ``$TXN_BROKER_HOME``, default ``./.txn_broker``), initialised on first use.
    SQLite databases are migrated automatically; PostgreSQL needs ``txn-broker db upgrade``.
    ``storage_options``: the object store's settings, passed explicitly (for S3:
    ``endpoint_url``, ``region_name``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``addressing_style``; see :func:`txn_broker.storage.open_store`);
    one not given falls back to ``TXN_BROKER_S3_ENDPOINT_URL`` and boto3's own chain, and
    the process environment is never written.
    ``iceberg_catalog``: pyiceberg's catalog properties (``type``, ``uri``, ``warehouse``,
    credentials...) of the catalog topics with ``iceberg.enabled`` are published to;
    default: an SQL catalog in this metadata database, its warehouse under ``iceberg/`` in
    this storage. ``iceberg_namespace``: the tables' namespace (default ``txn_broker``).
    See docs/iceberg.md.
    ``settings``: see :class:`txn_broker.config.Settings`."""
    parsed = Settings.from_kwargs(settings)
    iceberg = IcebergSettings.of(iceberg_catalog, iceberg_namespace)
    db_url, _embedded = resolve_database_url(database_url)
    store = open_store(resolve_storage_url(storage_url), retry_budget_ms=parsed.retry_budget_ms,
                       **dict(storage_options or {}))
    db = Database(db_url, pool_size=parsed.pool_size, retry_budget_ms=parsed.retry_budget_ms)
    try:
        if db.dialect == "sqlite":
            db.create_file_directory()
            upgrade_db(db)
        else:
            require_current(db)
    except BaseException:
        db.dispose()
        raise
    return Broker(db, store, parsed, iceberg)


def upgrade_schema(database_url: str | None = None) -> SchemaUpgrade:
    """Bring the metadata database at ``database_url`` (default: as :func:`connect`) to the
    schema this code expects; run it as the schema's owner role. Creates the directory of
    an SQLite file. Returns what was applied (nothing when the schema was current)."""
    url, _embedded = resolve_database_url(database_url)
    applied = upgrade(url)
    return SchemaUpgrade(database=mask_url(url), applied=applied, current_version=latest_version())


class Broker:
    def __init__(self, db: Database, store: ObjectStore, settings: Settings,
                 iceberg: IcebergSettings | None = None) -> None:
        self._db = db
        self._store = store
        self.settings = settings
        self._topics = Topics(db, settings)
        self._coordinator = Coordinator(db, settings)
        self._outcome_tally: OutcomeTally | None = None  # transactions counted by metrics_figures
        self.iceberg_settings = iceberg or IcebergSettings()
        self._publisher: Publisher | None = None

    def __repr__(self) -> str:
        return f"Broker(database={self.database_location!r}, storage={self.storage_location!r})"

    # -- where it lives, and its clock ---------------------------------------------------

    @property
    def database_location(self) -> str:
        """The metadata database's URL with its password masked: safe to log and show."""
        return mask_url(self._db.url)

    @property
    def storage_location(self) -> str:
        """The object store's URL without any user info: safe to log and show."""
        return strip_userinfo(self._store.url)

    def now_ms(self) -> int:
        """The database's clock (ms since the epoch): the only clock the coordinator trusts,
        so ages computed against it never depend on the caller's machine."""
        return int(self._db.read(lambda tx: tx.scalar("now_ms")))

    def check_storage(self) -> None:
        """List the object store once (StorageUnavailableError if it cannot be reached)."""
        next(iter(self._store.list("topics/")), None)

    def privileged_role_warning(self) -> str | None:
        """Advice when the database is reached as the schema's owner or a superuser instead
        of a login of the least-privilege client role (``sql/roles.sql``); None otherwise.
        Names roles, never a password."""
        from .roles import privileged_role_warning

        return privileged_role_warning(self._db)

    # -- the schema ----------------------------------------------------------------------

    def pending_migrations(self) -> list[str]:
        """Schema migrations this code expects that the database has not applied."""
        return pending(self._db)

    def upgrade_schema(self) -> list[str]:
        """Apply pending schema migrations (as the owner role); returns the versions applied."""
        return upgrade_db(self._db)

    # -- topics --------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, schema: pa.Schema | None = None,
                     config: dict[str, Any] | None = None) -> TopicDescription:
        """Create a topic. ``schema``: a pyarrow.Schema (default: key, value binary and
        headers map<string, binary>). ``config``: retention.ms, retention.bytes,
        max.message.bytes, iceberg.enabled... (txn_broker.topic_configs). Raises
        InvalidTopicNameError, TopicAlreadyExistsError, SchemaMismatchError,
        InvalidConfigError; with ``iceberg.enabled`` also IcebergSchemaError (a type the
        table cannot hold) and CatalogUnavailableError (the catalog cannot be reached),
        both before anything is written."""
        if check_changes(config).get("iceberg.enabled"):
            from .iceberg.catalog import check_reachable
            from .iceberg.schema import check_representable

            check_representable(DEFAULT_SCHEMA if schema is None else schema)
            check_reachable(self._iceberg_publisher().catalog, self.iceberg_settings)
        meta = self._topics.create(name, partitions, schema, config)
        if meta.config.get("iceberg.enabled"):
            try:
                self._iceberg_publisher().table(meta)
            except TxnBrokerError as error:  # made by the first publish instead
                log.warning("topic %s created; its Iceberg table will be made by the first publish: %s",
                            name, error)
        return self.describe_topic(name)

    def ensure_topics(self, topics: Mapping[str, tuple[int, pa.Schema | None]] | Iterable[TopicSpec],
                      config: dict[str, Any] | None = None, *, evolve: bool = False,
                      by: str | None = None) -> dict[str, str]:
        """Create each topic that does not exist yet, given as :class:`TopicSpec` values or
        as ``{name: (partitions, schema)}`` (``config`` for the new ones, where a spec has
        none). An existing topic must have the same partition count (InvalidConfigError)
        and, when a schema is given, the same schema (SchemaMismatchError). Safe to run
        concurrently and repeatedly: the set-up step of every pipeline. Returns
        ``{name: "created" | "exists" | "evolved"}``.

        ``evolve``: an existing topic whose declared schema or partition count differs is
        altered to it instead (:meth:`alter_topic`, recorded as ``by``): a new schema
        version when the change keeps the topic's rules, more partitions when more are
        declared. A change the rules refuse raises IncompatibleSchemaError naming the
        topic, the field and the rule; fewer partitions, InvalidPartitionsError. So a
        pipeline's code carries its topics' changes, checked when it is deployed."""
        specs = ([TopicSpec(name, partitions, schema) for name, (partitions, schema) in topics.items()]
                 if isinstance(topics, Mapping) else [spec for spec in topics])
        for spec in specs:
            if not isinstance(spec, TopicSpec):
                raise InvalidInputError(f"ensure_topics takes TopicSpec values, got {type(spec).__name__}")
        done: dict[str, str] = {}
        existing = set(self.list_topics())
        for spec in specs:
            name, partitions, schema = spec.name, spec.partitions, spec.schema
            if name not in existing:
                try:
                    self.create_topic(name, partitions=partitions, schema=schema,
                                      config=spec.config if spec.config is not None else config)
                    done[name] = "created"
                    continue
                except TopicAlreadyExistsError:
                    pass  # created concurrently: check it like any existing one
            described = self.describe_topic(name)
            if evolve:
                done[name] = self._evolve(described, spec, by)
                continue
            if len(described.partitions) != partitions:
                raise InvalidConfigError(
                    f"topic {name!r} exists with {len(described.partitions)} partitions, expected {partitions}")
            if schema is not None and not described.schema.equals(schema.remove_metadata()):
                raise SchemaMismatchError(
                    f"topic {name!r} exists with schema {described.schema}, expected {schema}")
            done[name] = "exists"
        return done

    def _evolve(self, described: TopicDescription, spec: TopicSpec, by: str | None) -> str:
        """An existing topic altered to its declaration; "evolved" or "exists"."""
        schema = None
        if spec.schema is not None and not _same_columns(described.schema, spec.schema):
            schema = spec.schema
        partitions = spec.partitions if spec.partitions != len(described.partitions) else None
        if schema is None and partitions is None:
            return "exists"
        try:
            self.alter_topic(spec.name, schema=schema, partitions=partitions, by=by)
        except IncompatibleSchemaError as error:
            raise IncompatibleSchemaError(
                f"topic {spec.name!r} cannot evolve to its declared schema: {error}", field=error.field,
                rule=error.rule) from None
        return "evolved"

    def alter_topic(self, name: str, *, schema: pa.Schema | None = None, partitions: int | None = None,
                    config: Mapping[str, Any] | None = None, by: str | None = None) -> TopicDescription:
        """Change a topic while pipelines run, in one database transaction recorded with
        ``by`` (default ``user@host``) and the time (docs/semantics.md, "Schema evolution"):

        * ``schema``: the next schema version. Fields are matched to the latest version by
          field id when they carry one (``PARQUET:field_id`` in the field's metadata: how
          a rename is expressed), else by name; a new field takes the next id. The change
          must keep the structural rules and the topic's ``schema.compatibility``
          (IncompatibleSchemaError naming the field and the rule otherwise).
        * ``partitions``: a larger partition count (InvalidPartitionsError to shrink).
          Keyed records go to the new count from then on.
        * ``config``: topic configs to change (InvalidConfigError for an unknown key or a
          bad value); the schema change, if any, is checked under the new configs.

        Nothing changes when any part is refused. Returns the topic's description.

        A topic with ``iceberg.enabled`` whose schema changed has its table's schema evolved
        right after (docs/iceberg.md, "Schema evolution"); if the catalog does not answer,
        the next publish does it (a warning is logged, the alteration stands)."""
        self._topics.alter(name, schema=schema, partitions=partitions, config=config, by=by)
        if schema is not None:
            meta = self._topics.get(name, refresh=True)
            if meta.config.get("iceberg.enabled"):
                try:
                    self._iceberg_publisher().evolve(meta)
                except TxnBrokerError as error:
                    log.warning("topic %s altered; its Iceberg table's schema will follow at the next publish: %s",
                                name, error)
        return self.describe_topic(name)

    def topic_alterations(self, name: str) -> list[dict[str, Any]]:
        """Every alteration of a topic, oldest first: ``seq``, ``altered_ms``, ``altered_by``
        and ``changes`` (what changed: ``schema``, ``partitions``, ``config``)."""
        return self._topics.alterations(name)

    def list_topics(self) -> list[str]:
        return self._topics.names()

    def describe_topic(self, name: str) -> TopicDescription:
        return self._topics.describe(name)

    def delete_topic(self, name: str) -> None:
        """Drop a topic's Iceberg table, if it has one (CatalogUnavailableError before
        anything else when the catalog cannot be reached), then the topic's metadata, then
        its objects (what is left behind is gc's)."""
        meta = self._topics.get(name, refresh=True)
        if meta.config.get("iceberg.enabled"):
            from .iceberg.catalog import drop_table

            drop_table(self._iceberg_publisher().catalog, self.iceberg_settings, meta)
        keys = self._topics.delete(name)
        try:
            self._store.delete(keys)
        except StorageUnavailableError as error:
            log.warning("topic %s deleted; %d objects left for gc: %s", name, len(keys), error)

    def delete_records(self, topic: str, offsets: Mapping[int, int]) -> dict[int, int]:
        """Kafka's DeleteRecords: make the records of each partition below its offset (-1:
        the high watermark) unreadable by moving the partition's log start offset there
        (inside a segment if need be; segments wholly below are deleted, their objects
        queued for gc). Returns each partition's new log start offset (its low watermark);
        an offset below the current one leaves it as it is. All partitions or none:
        OffsetOutOfRangeError for an offset past a high watermark (or below -1),
        UnknownTopicOrPartitionError for an unknown topic or partition, InvalidInputError
        for an offset that is not an int. docs/semantics.md, "Deleting records"."""
        if not isinstance(offsets, Mapping):
            raise InvalidInputError(f"offsets must map partitions to offsets, got {type(offsets).__name__}")
        meta = self._topics.get(topic)
        for partition in offsets:
            validate_partition(partition, meta.partition_count, topic)
        return delete_records(self._db, meta.topic_id, meta.name, offsets)

    def check_offset(self, meta: TopicMeta, partition: int, offset: Any, *,
                     allow_below_start: bool = True) -> None:
        """Raise OffsetOutOfRangeError unless ``offset`` lies in [log start (or 0), HW]
        (InvalidInputError if it is not an int)."""
        check_offset(self._db, meta.topic_id, meta.name, partition, offset, allow_below_start=allow_below_start)

    def end_offsets(self, partitions: Iterable[TopicPartition],
                    isolation_level: str = READ_COMMITTED) -> dict[TopicPartition, int]:
        """The first offset not readable at ``isolation_level``: the last stable offset for
        read_committed, the high watermark for read_uncommitted."""
        out = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            meta = self._topics.get(tp.topic)
            validate_partition(tp.partition, meta.partition_count, tp.topic)
            offsets = self._offsets(meta, tp.partition)
            out[tp] = offsets.end(isolation_level)
        return out

    def _offsets(self, meta: TopicMeta, partition: int) -> PartitionOffsets:
        offsets = self._db.read(lambda tx: partition_offsets(tx, meta.topic_id, partition))
        if offsets is None:
            raise UnknownTopicOrPartitionError(f"{meta.name}-{partition} no longer exists")
        return offsets

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        out = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            meta = self._topics.get(tp.topic)
            validate_partition(tp.partition, meta.partition_count, tp.topic)
            out[tp] = self._offsets(meta, tp.partition).log_start_offset
        return out

    def offsets_for_times(self, partitions: Iterable[TopicPartition], timestamp_ms: int
                          ) -> dict[TopicPartition, int]:
        """Kafka's ``offsetsForTimes``: per partition, the first offset whose record has a
        timestamp at or after ``timestamp_ms`` (the last stable offset when none has; never
        below the log start). Found from the segments' max timestamps, then within the one
        segment by its records' timestamps. What ``groups reset-offsets --to-datetime``
        and the operators' reprocessing use."""
        out = {}
        for tp in partitions:
            tp = TopicPartition(*tp)
            meta = self._topics.get(tp.topic)
            validate_partition(tp.partition, meta.partition_count, tp.topic)
            out[tp] = self._offset_for_time(meta, tp.partition, timestamp_ms)
        return out

    def _offset_for_time(self, meta: TopicMeta, partition: int, timestamp_ms: int) -> int:
        import pyarrow.compute as pc

        offsets = self._offsets(meta, partition)
        found = self._db.read(lambda tx: first_segment_at_time(tx, meta.topic_id, partition, timestamp_ms))
        if found is None:
            return offsets.last_stable_offset
        base, count = found
        offset = base
        consumer = self.consumer(isolation_level="read_uncommitted")
        try:
            tp = TopicPartition(meta.name, partition)
            consumer.assign([tp])
            consumer.seek(tp, max(base, offsets.log_start_offset))
            batch = consumer.poll(max_records=count)
            if batch.num_rows:
                times = pc.cast(batch["_timestamp"], pa.int64())
                late = pc.filter(batch["_offset"], pc.greater_equal(times, pa.scalar(timestamp_ms, pa.int64())))
                if len(late):
                    offset = int(late[0].as_py())
        finally:
            consumer.close()
        return max(offset, offsets.log_start_offset)

    def segment_registered(self, object_key: str) -> bool:
        """Whether an uploaded object was registered as a segment."""
        return segment_registered(self._db, object_key)

    # -- clients -------------------------------------------------------------------------

    def producer(self, transactional_id: str | None = None, transaction_timeout_ms: int | None = None,
                 *, metrics: Any = None) -> Producer:
        """An idempotent producer, or a transactional one when ``transactional_id`` is set.
        ``transaction_timeout_ms``: None means the broker's ``Settings.transaction_timeout_ms``.
        ``metrics``: a prometheus_client ``CollectorRegistry`` (or a
        ``txn_broker.metrics.ClientMetrics``) to record commit and abort latency, records
        and bytes sent, retries and errors in (docs/observability.md); None: nothing kept."""
        from .metrics.client import client_metrics

        timeout = self.settings.transaction_timeout_ms if transaction_timeout_ms is None else transaction_timeout_ms
        return Producer(self._coordinator, self._topics, self._db, self._store, self.settings, transactional_id,
                        timeout, metrics=client_metrics(metrics))

    def consumer(self, group_id: str | None = None, isolation_level: str = READ_COMMITTED,
                 auto_offset_reset: str = "earliest", *,
                 metadata_max_age_ms: int = DEFAULT_METADATA_MAX_AGE_MS, metrics: Any = None) -> Consumer:
        """A consumer. ``metadata_max_age_ms``: how often it looks its topics up again (a
        newer schema version, partitions added to a subscribed topic). ``metrics``: as for
        :meth:`producer` (records and bytes polled, errors)."""
        from .metrics.client import client_metrics

        return Consumer(self._db, self._store, self._topics, group_id, isolation_level, auto_offset_reset,
                        metadata_max_age_ms=metadata_max_age_ms, metrics=client_metrics(metrics))

    # -- consumer groups -----------------------------------------------------------------

    def committed_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int | None]:
        """A group's committed offsets (the next offset to read); None where it has none."""
        return {tp: None if c is None else c.offset
                for tp, c in self.committed_metadata(group_id, partitions).items()}

    def committed_metadata(self, group_id: str, partitions: Iterable[TopicPartition]
                           ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """A group's committed offsets with the metadata string and leader epoch they were
        committed with (by ``commit_offsets``, a transaction or a Kafka client); None where
        it has none."""
        return committed_offsets(self._db, self._topics, group_id, partitions)

    def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit a group's offsets outside any transaction (validated: 0 <= offset <= HW):
        ints, or OffsetAndMetadata values to keep a metadata string and leader epoch."""
        commit_offsets(self._db, self._topics, group_id, offsets)

    def list_groups(self) -> list[str]:
        return [r.group_id for r in self._db.run(lambda tx: tx.all("list_groups"), write=False)]

    def describe_group(self, group_id: str) -> GroupDescription:
        """Committed offset, log ends and lag per partition. ``lag`` is measured against
        the last stable offset (what a read_committed reader can reach)."""
        validate_id("group id", group_id)
        rows = self._db.read(lambda tx: tx.all("describe_group", group_id=group_id))
        if not rows:
            raise UnknownGroupError(f"group {group_id!r} has no committed offsets")
        return GroupDescription(group_id, [
            GroupPartition(r.topic, r.partition_no, r.committed_offset, r.log_start_offset,
                           r.high_watermark, max(r.last_stable_offset, r.log_start_offset), r.commit_ms) for r in rows])

    def delete_group(self, group_id: str) -> None:
        """Forget a group: every committed offset of it (Kafka's DeleteGroups).
        UnknownGroupError if it has none. Offsets staged by an open transaction still land
        if that transaction commits."""
        validate_id("group id", group_id)
        if not self._db.run(lambda tx: tx.execute("delete_group_offsets", group_id=group_id)):
            raise UnknownGroupError(f"group {group_id!r} has no committed offsets")

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Forget a group's committed offsets of ``partitions`` (Kafka's OffsetDelete); a
        partition the group has no offset for is left as it is."""
        validate_id("group id", group_id)
        keys = []
        for tp in partitions:
            tp = TopicPartition(*tp)
            meta = self._topics.get(tp.topic)
            validate_partition(tp.partition, meta.partition_count, tp.topic)
            keys.append({"group_id": group_id, "topic_id": meta.topic_id, "partition_no": tp.partition})
        keys.sort(key=lambda k: (k["topic_id"], k["partition_no"]))
        self._db.run(lambda tx: [tx.execute("delete_group_offset", **k) for k in keys])

    # -- transactions: sweeps and admin --------------------------------------------------

    def abort_expired_transactions(self) -> list[SweepAction]:
        return self._coordinator.abort_expired_transactions()

    def complete_prepared_transactions(self) -> list[SweepAction]:
        return self._coordinator.complete_prepared_transactions()

    def expire_transactional_ids(self) -> dict[str, Any]:
        return self._coordinator.expire_transactional_ids()

    def abort_transaction(self, transactional_id: str) -> SweepAction:
        """Admin abort: bump the epoch (fencing the producer), then abort."""
        validate_id("transactional id", transactional_id)
        return self._coordinator.admin_abort(transactional_id)

    def list_transactions(self, states: Iterable[str] | None = None) -> list[TransactionSummary]:
        """Every transactional id (in ``states`` only, when given) with its current (or last)
        transaction: size, outcome, end, age. InvalidInputError for an unknown state."""
        wanted = None
        if states is not None:
            if isinstance(states, str):
                states = [states]
            try:
                wanted = {TxnState(s).value for s in states}
            except ValueError:
                raise InvalidInputError(
                    f"unknown state in {list(states)}; states: {[s.value for s in TxnState]}") from None
        rows = self._db.read(lambda tx: tx.all("list_transactional_ids"))
        return [TransactionSummary(**r._mapping) for r in rows if wanted is None or r.state in wanted]

    def describe_transaction(self, transactional_id: str, history_limit: int = 200) -> TransactionDescription:
        validate_id("transactional id", transactional_id)

        def work(tx: Tx) -> TransactionDescription:
            summary = tx.one("transactional_id_summary", transactional_id=transactional_id)
            history = tx.all("state_log_of", transactional_id=transactional_id, limit=history_limit)
            if summary is None and not history:
                raise UnknownTransactionalIdError(f"no transactional id {transactional_id!r}")
            txn_id = summary.txn_id if summary else (history[-1].txn_id if history else None)
            parts = tx.all("txn_partitions_of", txn_id=txn_id) if txn_id is not None else []
            pending = tx.all("txn_offsets_of", txn_id=txn_id) if txn_id is not None else []
            segments = tx.all("txn_segments_of", txn_id=txn_id) if txn_id is not None else []
            runs = tx.all("transactions_of", transactional_id=transactional_id, limit=50)
            return TransactionDescription(
                transactional_id=transactional_id,
                state=summary.state if summary else TxnState.DEAD.value,
                producer_id=summary.producer_id if summary else history[-1].producer_id,
                producer_epoch=summary.producer_epoch if summary else history[-1].producer_epoch,
                timeout_ms=summary.timeout_ms if summary else 0,
                txn_id=txn_id,
                start_ms=summary.txn_start_ms if summary else None,
                last_update_ms=summary.last_update_ms if summary else history[-1].at_ms,
                partitions=[TxnPartition(p.topic, p.partition_no, p.first_offset, p.last_offset,
                                         p.record_count, p.size_bytes, p.marker, p.marker_offset,
                                         p.marker_ms) for p in parts],
                pending_offsets=[dict(o._mapping) for o in pending],
                segments=[dict(s._mapping) for s in segments],
                history=[StateChange(h.from_state, h.to_state, h.at_ms, h.producer_id, h.producer_epoch,
                                     h.txn_id, h.reason) for h in history],
                transactions=[dict(r._mapping) for r in runs],
            )

        return self._db.read(work)

    def find_hanging_transactions(self, older_than_ms: int | None = None) -> list[HangingTransaction]:
        """Open transactions older than ``older_than_ms`` (default: their own timeout)
        that hold back some partition's last stable offset."""
        if older_than_ms is not None and (not isinstance(older_than_ms, int) or older_than_ms < 0):
            raise InvalidInputError(f"older_than_ms must be a non-negative int, got {older_than_ms!r}")
        rows = self._db.read(lambda tx: tx.all("hanging_transactions", older_than_ms=older_than_ms))
        by_id: dict[str, HangingTransaction] = {}
        for r in rows:
            h = by_id.get(r.transactional_id)
            if h is None:
                h = by_id[r.transactional_id] = HangingTransaction(
                    r.transactional_id, r.producer_id, r.producer_epoch, r.txn_id, r.txn_start_ms,
                    r.timeout_ms, r.now_ms - r.txn_start_ms, [], {})
            tp = TopicPartition(r.topic, r.partition_no)
            h.partitions.append(tp)
            h.first_offsets[tp] = r.first_offset
        return list(by_id.values())

    def recent_transactions(self, limit: int = 200) -> list[dict[str, Any]]:
        """Transaction instances, newest first, for monitoring."""
        return [dict(r._mapping) for r in self._db.read(lambda tx: tx.all("recent_transactions", limit=limit))]

    # -- observability (docs/observability.md) ------------------------------------------

    def metrics_figures(self) -> BrokerFigures:
        """The broker-wide figures the Prometheus exporter serves (offsets, lag,
        transactions, gc backlog), read in one snapshot by a few set-based queries."""
        from .metrics.figures import OutcomeTally, read_figures

        if self._outcome_tally is None:
            self._outcome_tally = OutcomeTally()
        return read_figures(self._db, tally=self._outcome_tally)

    # -- Iceberg tables (docs/iceberg.md) -------------------------------------------------

    def _iceberg_publisher(self) -> Publisher:
        if self._publisher is None:
            from .iceberg.publisher import Publisher

            self._publisher = Publisher(self._db, self._store, self._topics, self.iceberg_settings,
                                        self._db.url.render_as_string(hide_password=False))
        return self._publisher

    def publish_iceberg(self, topics: Iterable[str] | None = None) -> list[TopicPublish]:
        """Publish every record committed up to now in ``topics`` (default: every topic
        with ``iceberg.enabled``) to their Iceberg tables, one snapshot per topic holding
        whole transactions, exactly once (docs/iceberg.md). Raises InvalidConfigError for
        a topic without ``iceberg.enabled``; CatalogUnavailableError,
        IcebergCommitConflictError, DatabaseUnavailableError, StorageUnavailableError
        (retriable: the table stays at its last snapshot)."""
        publisher = self._iceberg_publisher()
        return [publisher.publish(meta) for meta in publisher.enabled_topics(topics)]

    def iceberg_status(self, topics: Iterable[str] | None = None) -> list[TableStatus]:
        """Per topic with ``iceberg.enabled`` (or ``topics``) and partition: the offsets its
        table holds against the last stable offset, and how far behind it is."""
        from .iceberg.status import table_status

        publisher = self._iceberg_publisher()
        return [table_status(self._db, publisher, meta) for meta in publisher.enabled_topics(topics)]

    def iceberg_table(self, topic: str) -> Table:
        """The topic's Iceberg table (a pyiceberg ``Table``: ``.scan().to_arrow()``,
        ``.inspect.snapshots()``...); InvalidConfigError without ``iceberg.enabled``."""
        publisher = self._iceberg_publisher()
        return publisher.table(publisher.enabled_topics([topic])[0])

    # -- maintenance ---------------------------------------------------------------------

    def gc(self, *, dry_run: bool = False, orphan_grace_ms: int | None = None,
           delete_delay_ms: int | None = None, progress: Progress | None = None, compact: bool = True) -> GcReport:
        """Garbage collection (docs/cli.md, ``txn-broker gc``): purge the segments of aborted
        transactions, apply retention, delete queued objects older than ``delete_delay_ms``
        (default 60 s) and unregistered objects older than ``orphan_grace_ms`` (default
        max(24 h, max_transaction_timeout_ms)). ``dry_run``: report, change nothing.
        ``progress`` receives a line per step. Returns a GcReport."""
        return collect_garbage(self._db, self._store, self.settings, dry_run=dry_run, orphan_grace_ms=orphan_grace_ms,
                               delete_delay_ms=DEFAULT_DELETE_DELAY_MS if delete_delay_ms is None
                               else delete_delay_ms, progress=progress, compact=compact)

    def compact(self, topics: Iterable[str] | None = None, *, dry_run: bool = False,
                min_age_ms: int | None = None, progress: Progress | None = None) -> CompactionReport:
        """Merge the small committed segments of ``topics`` (None: every topic) into
        segments of about their ``segment.bytes``, dropping aborted records (docs/cli.md,
        ``txn-broker compact``; docs/semantics.md, "Compaction"). ``min_age_ms``: merge
        segments at least this old (default: each topic's ``min.compaction.lag.ms``).
        ``dry_run``: report what would be merged, change nothing. Returns a
        CompactionReport; UnknownTopicOrPartitionError for an unknown topic."""
        if min_age_ms is not None and (not isinstance(min_age_ms, int) or isinstance(min_age_ms, bool)
                                       or min_age_ms < 0):
            raise InvalidInputError(f"min_age_ms must be a non-negative number of milliseconds, got {min_age_ms!r}")
        names = None if topics is None else [topics] if isinstance(topics, str) else list(topics)
        return compact(self._db, self._store, self.settings, partial(self._topics.get, refresh=True), names,
                       dry_run=dry_run,
                       min_age_ms=min_age_ms, progress=progress)

    def fsck(self, *, progress: Progress | None = None) -> FsckReport:
        """Check the metadata against the object store (``txn-broker fsck``); ``progress``
        receives a line per step. Returns an FsckReport (``ok``, problems, warnings)."""
        return check(self._db, self._store, self.settings, progress=progress, iceberg=self._iceberg_check())

    def _iceberg_check(self) -> Callable[[], Iterable[tuple[str, int | None, str]]] | None:
        """fsck's check of the Iceberg tables, when a topic has ``iceberg.enabled``."""
        metas = [self._topics.get(n, refresh=True) for n in self._topics.names()]
        enabled = [m for m in metas if m.config.get("iceberg.enabled")]
        if not enabled:
            return None

        def problems() -> Iterable[tuple[str, int | None, str]]:
            from .iceberg.check import check_table

            publisher = self._iceberg_publisher()
            for meta in enabled:
                yield from check_table(self._db, publisher, meta)

        return problems

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
        self._db.dispose()

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _same_columns(current: pa.Schema, declared: pa.Schema) -> bool:
    """Whether a declared schema is the topic's latest as it stands: the same columns, types,
    nullability and declared defaults (field ids are the broker's, not the declaration's)."""
    if not current.equals(declared.remove_metadata()):
        return False
    return all(declared_default(a) == declared_default(b) for a, b in zip(current, declared, strict=True))
