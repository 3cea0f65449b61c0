"""A pyiceberg transaction that computes its table metadata once per change (imports
pyiceberg; imported only where a commit is made).

pyiceberg 0.12's ``Transaction.table_metadata`` applies the staged updates to the table's
metadata and returns a deep copy of the result on every access, and one fast append reads
it about a dozen times (its snapshot id, properties, schema, spec, parent, sequence
number...). The cost grows with the table's history (every snapshot is copied each time):
the CPU time of one commit went from 14 to 10 ms on a table of 11 snapshots, from 62 to
22 ms at 110 and from 215 to 147 ms at 410. The metadata is a frozen pydantic model, so
the same result can serve every read until the next staged update changes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyiceberg.table import Transaction
from pyiceberg.table.update import update_table_metadata

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata


class CachedTransaction(Transaction):
    """``Transaction`` whose ``table_metadata`` is computed once per (base metadata,
    staged updates) pair."""

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self._cached: tuple[object, tuple[object, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        cached = self._cached
        if cached is None or cached[0] is not base or cached[1] is not updates:
            cached = self._cached = (base, updates, update_table_metadata(base, updates))
        return cached[2]


def transaction(table: Table) -> CachedTransaction:
    """``table.transaction()``, with the metadata computed once per change."""
    return CachedTransaction(table)
