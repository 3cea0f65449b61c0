"""The partition log: what a segment is and where it lives, how one is written, appended
and read, and how a log's head is truncated.

* :mod:`.keys`: segment object keys (``topics/{topic_id}/{partition}/...``), formatted and
  parsed in one place.
* :mod:`.batches`: record batches as the log takes them: topic schemas, validation of
  sends, record sizes, the key partitioner.
* :mod:`.segment_format`: the segment format (Arrow IPC, compression, ``_timestamp``) and
  the schema readers get.
* :mod:`.types`: the data path's values: producer identity, transaction handle, segment
  write, append result.
* :mod:`.segment_writer`: building a segment from a table and uploading it (the producer
  and the Spark data source).
* :mod:`.appends`: appends: idempotence by sequence or object key, offset assignment,
  registration.
* :mod:`.partition`: a partition's ends, offsets checked against them, fetch planning.
* :mod:`.reader`: loading segments, their cache, rows with metadata columns.
* :mod:`.truncation`: retention's truncation of a log's head.
* :mod:`.record_deletion`: deleting records below an offset (DeleteRecords).
"""
