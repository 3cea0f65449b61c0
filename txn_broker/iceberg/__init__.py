"""Topics as Iceberg tables (docs/iceberg.md).

A topic created with ``iceberg.enabled=true`` is published to the table
``<namespace>.<topic>`` (namespace ``txn_broker`` by default) of an Iceberg catalog: by
default a pyiceberg SQL catalog in the broker's own metadata database, its warehouse under
``iceberg/`` in the broker's storage. The publisher refines committed Arrow segments into
Parquet data files and commits one table snapshot per publish, holding whole transactions
and recording in its summary the offsets it holds per partition.

Modules: :mod:`.schema` (the table's schema from the topic's, pure Arrow),
:mod:`.catalog` (opening the catalog and the table), :mod:`.files` (writing data files),
:mod:`.publisher` (the publish loop), :mod:`.status` (how far behind a table is),
:mod:`.warehouse` (the files gc may delete). pyiceberg is imported by the modules that
need it, never by ``import txn_broker``.
"""
