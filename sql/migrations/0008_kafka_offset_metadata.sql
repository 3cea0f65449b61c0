-- 0008: a committed offset's metadata string and leader epoch, as Kafka's OffsetCommit and
-- TxnOffsetCommit send them and OffsetFetch answers them (docs/kafka-protocol.md). NULL:
-- none was given (answered as "" and -1, as Kafka does).

ALTER TABLE group_offsets ADD COLUMN metadata TEXT;

ALTER TABLE group_offsets ADD COLUMN leader_epoch INTEGER;

ALTER TABLE txn_offsets ADD COLUMN metadata TEXT;

ALTER TABLE txn_offsets ADD COLUMN leader_epoch INTEGER;
