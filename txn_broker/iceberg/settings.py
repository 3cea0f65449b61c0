"""Which Iceberg catalog a broker publishes to (no pyiceberg here: the broker holds these
from ``connect()`` on, and pyiceberg is imported only when a table is used)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidConfigError

DEFAULT_NAMESPACE = "txn_broker"
#: the name of the default SQL catalog (its rows' ``catalog_name`` in ``iceberg_tables``)
DEFAULT_CATALOG_NAME = "txn_broker"
#: where the default catalog's warehouse lives in the broker's storage, next to ``topics/``
WAREHOUSE_PREFIX = "iceberg/"
#: catalog types pyiceberg implements (its own names)
CATALOG_TYPES = ("rest", "hive", "glue", "dynamodb", "sql", "in-memory", "bigquery")
#: property names whose values are secrets: never logged, never shown
SECRET_PROPERTY = re.compile(r"secret|token|password|credential|key-id", re.I)
_NAMESPACE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class IcebergSettings:
    """``catalog``: pyiceberg's own catalog properties (``type`` first among them: ``rest``,
    ``glue``, ``hive``, ``sql``...; ``uri``, ``warehouse``, credentials) for a catalog other
    than the default; None: the default SQL catalog in the broker's database, its
    warehouse in the broker's storage. Nothing is read from the environment or from
    ``~/.pyiceberg.yaml``: the catalog gets exactly these properties."""

    namespace: str = DEFAULT_NAMESPACE
    catalog: Mapping[str, str] | None = None
    catalog_name: str = DEFAULT_CATALOG_NAME

    @classmethod
    def of(cls, catalog: Mapping[str, object] | None = None, namespace: str | None = None) -> IcebergSettings:
        """Checked settings: InvalidConfigError for a namespace that is not a plain name,
        a catalog without a known ``type`` or with a value that is not a string."""
        ns = DEFAULT_NAMESPACE if namespace is None else namespace
        if not isinstance(ns, str) or not _NAMESPACE.fullmatch(ns):
            raise InvalidConfigError(f"iceberg namespace must be a name of [A-Za-z0-9_], got {ns!r}")
        if catalog is None:
            return cls(ns)
        if not isinstance(catalog, Mapping):
            raise InvalidConfigError(f"iceberg catalog must be a dict of pyiceberg catalog properties, "
                                     f"got {type(catalog).__name__}")
        props: dict[str, str] = {}
        for key, value in catalog.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidConfigError(f"iceberg catalog property {key!r} must be a string")
            props[key] = value
        kind = props.get("type")
        if kind not in CATALOG_TYPES:
            raise InvalidConfigError(
                f"unknown iceberg catalog type {kind!r}; the catalog properties need type= one of "
                f"{', '.join(CATALOG_TYPES)} (pyiceberg's catalog properties)")
        name = props.pop("name", DEFAULT_CATALOG_NAME)
        return cls(ns, props, name)

    @property
    def is_default(self) -> bool:
        return self.catalog is None

    def describe(self) -> dict[str, str]:
        """The catalog's properties with secrets masked: safe to log and show."""
        if self.catalog is None:
            return {"type": "sql (the broker's database)", "namespace": self.namespace}
        return {**{k: ("***" if SECRET_PROPERTY.search(k) else v) for k, v in self.catalog.items()},
                "namespace": self.namespace}
