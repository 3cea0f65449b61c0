-- 0008: a committed offset's metadata string and leader epoch, as Kafka's OffsetCommit and
-- TxnOffsetCommit send them and OffsetFetch answers them (docs/kafka-protocol.md). The
-- metadata is kept as a JSON string literal (PostgreSQL's text cannot hold the NUL that
-- librdkafka ends it with). NULL: none was given (answered as "" and -1, as Kafka does).

ALTER TABLE group_offsets ADD COLUMN metadata TEXT;

ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER;

ALTER TABLE txn_offsets ADD COLUMN metadata TEXT;

ALTER TABLE txn_offsets ADD COLUMN leader_epoch INTEGER;
