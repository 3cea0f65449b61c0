"""Opening a broker's Iceberg catalog and a topic's table (imports pyiceberg).

The default catalog is pyiceberg's SQL catalog on the broker's own metadata database (its
tables ``iceberg_tables`` and ``iceberg_namespace_properties`` are created by migration
0007, so least-privilege roles use them), its warehouse under ``iceberg/`` in the broker's
storage. Its file IO gets the broker's own storage options (endpoint, region,
credentials) as pyiceberg properties: an option the broker was not given is not given
to pyiceberg either, which then falls back to the same AWS chain boto3 uses. Any other
catalog is built from pyiceberg's own properties, given explicitly
(:class:`IcebergSettings`); pyiceberg's environment variables and ``~/.pyiceberg.yaml``
are never read for it.

Catalog failures become typed errors here: CatalogUnavailableError (retriable) for a
catalog that cannot be reached, InvalidConfigError for one that cannot be built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import CatalogUnavailableError, InvalidConfigError, TxnBrokerError
from ..storage import ObjectStore
from .schema import table_schema
from .settings import WAREHOUSE_PREFIX, IcebergSettings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from ..topics import TopicMeta

log = logging.getLogger(__name__)
T = TypeVar("T")

#: table properties every topic table gets: no automatic commit retry (pyiceberg re-applies
#: a failed append on top of the winner's snapshot, which would publish offsets twice; the
#: publisher re-reads the table's offsets and starts again instead), zstd Parquet
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "0",
    "write.parquet.compression-codec": "zstd",
    "format-version": "2",
}
#: the summary / table property naming the topic a table belongs to
TOPIC_ID_PROPERTY = "txn-broker.topic-id"
#: the table property recording the topic schema version the table's schema is (.evolution)
SCHEMA_VERSION_PROPERTY = "txn-broker.schema-version"


def missing_pyiceberg() -> InvalidConfigError:
    return InvalidConfigError("Iceberg tables need pyiceberg: pip install -c constraints.txt 'txn-broker[iceberg]'")


def file_io_properties(store: ObjectStore) -> dict[str, str]:
    """pyiceberg FileIO properties for the broker's storage: its explicit options only."""
    props = {"py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    options = store.options()
    if store.url.startswith("s3://"):
        names = {"endpoint_url": "s3.endpoint", "region_name": "s3.region", "aws_access_key_id": "s3.access-key-id",
                 "aws_secret_access_key": "s3.secret-access-key", "aws_session_token": "s3.session-token"}
        props.update({names[k]: v for k, v in options.items() if k in names})
        if options.get("addressing_style") == "virtual":
            props["s3.force-virtual-addressing"] = "true"
        props.setdefault("s3.region", "us-east-1")  # pyarrow otherwise asks AWS for the bucket's region
    return props


def warehouse_location(store: ObjectStore) -> str:
    """The default catalog's warehouse: ``iceberg/`` next to ``topics/`` in the storage."""
    return f"{store.url.rstrip('/')}/{WAREHOUSE_PREFIX.rstrip('/')}"


def _catalog_uri(database_url: str) -> str:
    """The metadata database's URL as pyiceberg's SQL catalog opens it (SQLite: the same
    busy timeout as the broker, which writes to that file at the same time)."""
    if database_url.startswith("sqlite"):
        return database_url + ("&" if "?" in database_url else "?") + "timeout=60"
    return database_url


def open_catalog(settings: IcebergSettings, database_url: str, store: ObjectStore) -> Catalog:
    """The catalog ``settings`` name, reachable (CatalogUnavailableError otherwise)."""
    try:
        from pyiceberg.catalog import AVAILABLE_CATALOGS, CatalogType
    except ImportError:
        raise missing_pyiceberg() from None
    if settings.catalog is None:
        from pyiceberg.catalog.sql import SqlCatalog

        props = {"uri": _catalog_uri(database_url), "warehouse": warehouse_location(store),
                 "init_catalog_tables": "false", **file_io_properties(store)}
        return catalog_call(lambda: SqlCatalog(settings.catalog_name, **props), "open the default catalog")
    props = dict(settings.catalog)
    kind = CatalogType(props.pop("type"))
    return catalog_call(lambda: AVAILABLE_CATALOGS[kind](settings.catalog_name, props),
                        f"open the {kind.value} catalog")


def catalog_call(call: Callable[[], T], what: str) -> T:
    """``call()`` with pyiceberg's and its transports' failures as typed errors."""
    try:
        return call()
    except TxnBrokerError:
        raise
    except Exception as error:
        raise catalog_error(error, what) from None


def catalog_error(error: Exception, what: str) -> TxnBrokerError:
    """The typed error for a failure of pyiceberg or of the catalog's transport."""
    from pyiceberg import exceptions as iceberg_errors

    detail = " ".join(str(error).split())[:300]
    if isinstance(error, iceberg_errors.NoSuchPropertyException | ValueError | TypeError):
        return InvalidConfigError(f"cannot {what}: {type(error).__name__}: {detail}")
    return CatalogUnavailableError(f"cannot {what}: {type(error).__name__}: {detail}")


def check_reachable(catalog: Catalog, settings: IcebergSettings) -> None:
    """Make sure the catalog answers and the namespace exists (created if missing)."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    def ensure() -> None:
        if (settings.namespace,) not in {tuple(n) for n in catalog.list_namespaces()}:
            try:
                catalog.create_namespace(settings.namespace)
            except NamespaceAlreadyExistsError:
                pass  # created concurrently

    catalog_call(ensure, f"reach the catalog's namespace {settings.namespace!r}")


def table_identifier(settings: IcebergSettings, topic: str) -> tuple[str, str]:
    return settings.namespace, topic


def table_location(settings: IcebergSettings, store: ObjectStore, meta: TopicMeta) -> str:
    """Where a topic's table lives: ``<warehouse>/<namespace>/<topic>-<topic id>`` (the
    topic id keeps a recreated topic's files apart from a dropped one's); the warehouse
    is ``iceberg/`` in the broker's storage for the default catalog, the ``warehouse``
    property for any other (InvalidConfigError without one)."""
    if settings.catalog is None:
        warehouse = warehouse_location(store)
    else:
        warehouse = settings.catalog.get("warehouse", "")
        if not warehouse:
            raise InvalidConfigError("the iceberg catalog properties need warehouse= (where the tables' files go)")
    return f"{warehouse.rstrip('/')}/{settings.namespace}/{meta.name}-{meta.topic_id}"


def ensure_table(catalog: Catalog, settings: IcebergSettings, store: ObjectStore, meta: TopicMeta) -> Table:
    """The topic's table, created when missing (partitioned by identity(``_partition``)).
    A table of that name made for another topic (an earlier one of the same name that
    was deleted while its table was kept) is refused with InvalidConfigError."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    identifier = table_identifier(settings, meta.name)

    def load_or_create() -> Table:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            check_reachable(catalog, settings)
            try:
                table = catalog.register_table(identifier, _write_new_metadata(catalog, settings, store, meta))
            except TableAlreadyExistsError:
                table = catalog.load_table(identifier)
        owner = table.properties.get(TOPIC_ID_PROPERTY)
        if owner is not None and owner != str(meta.topic_id):
            raise InvalidConfigError(
                f"Iceberg table {'.'.join(identifier)} belongs to an earlier topic {meta.name!r} (topic id {owner}, "
                f"this one is {meta.topic_id}); drop that table or choose another namespace")
        return table

    return catalog_call(load_or_create, f"load or create the table {'.'.join(identifier)}")


def _write_new_metadata(catalog: Catalog, settings: IcebergSettings, store: ObjectStore, meta: TopicMeta) -> str:
    """Write a new table's first metadata file and return its location. Written here
    rather than by ``create_table``, which gives every column a fresh id: the table's
    columns keep the topic's field ids (``_partition`` 2, ``_offset`` 3, ``_timestamp`` 4,
    the topic's own from 5), so that every engine matches them by id."""
    import uuid

    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.serializers import ToOutputFile
    from pyiceberg.table.metadata import TableMetadataV2
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.transforms import IdentityTransform

    schema = pyarrow_to_schema(table_schema(meta.schema))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="_partition"),
                         spec_id=0)
    location = table_location(settings, store, meta)
    properties = {k: v for k, v in TABLE_PROPERTIES.items() if k != "format-version"}
    metadata = TableMetadataV2(  # type: ignore[call-arg]  # pydantic takes the field names too
        location=location, table_uuid=uuid.uuid4(), last_updated_ms=int(time.time() * 1000),
        last_column_id=schema.highest_field_id, schemas=[schema], current_schema_id=schema.schema_id,
        partition_specs=[spec], default_spec_id=0, last_partition_id=1000,
        sort_orders=[UNSORTED_SORT_ORDER], default_sort_order_id=UNSORTED_SORT_ORDER.order_id,
        properties={**properties, TOPIC_ID_PROPERTY: str(meta.topic_id),
                    SCHEMA_VERSION_PROPERTY: str(meta.schema_version)},
    )
    path = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
    ToOutputFile.table_metadata(metadata, load_file_io(properties=catalog.properties, location=path).new_output(path))
    return path


def drop_table(catalog: Catalog, settings: IcebergSettings, meta: TopicMeta) -> bool:
    """Drop the topic's table from the catalog (its files are left to gc's warehouse
    orphan scan in the default catalog); False when there was none or it belongs to
    another topic."""
    from pyiceberg.exceptions import NoSuchTableError

    identifier = table_identifier(settings, meta.name)

    def drop() -> bool:
        try:
            table = catalog.load_table(identifier)
        except NoSuchTableError:
            return False
        if table.properties.get(TOPIC_ID_PROPERTY) not in (None, str(meta.topic_id)):
            return False
        catalog.drop_table(identifier)
        return True

    return catalog_call(drop, f"drop the table {'.'.join(identifier)}")

