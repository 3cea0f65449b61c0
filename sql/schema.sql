-- The whole current schema of the broker's metadata database, portable between
-- PostgreSQL and SQLite. Record data lives in object storage; this is the index.
-- Times are milliseconds since the epoch, taken from the database's clock.
-- Must equal the result of applying migrations/ in order (tests/migration checks).
-- A statement after a comment line "only on postgresql" (or "only on sqlite") is run
-- on that database only (txn_broker.migrations.split_statements).

CREATE TABLE schema_migrations (
    version     TEXT PRIMARY KEY,
    applied_ms  BIGINT NOT NULL
);

-- Monotonic id allocators (producer ids, topic ids; transaction ids on SQLite).
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);

CREATE TABLE topics (
    topic_id         BIGINT PRIMARY KEY,
    name             TEXT NOT NULL UNIQUE,
    partition_count  INTEGER NOT NULL CHECK (partition_count > 0),
    arrow_schema     TEXT NOT NULL,      -- base64 of the Arrow IPC schema message
    config           TEXT NOT NULL,      -- JSON object of topic configs
    created_ms       BIGINT NOT NULL,
    schema_version   INTEGER NOT NULL DEFAULT 1,  -- the latest version (topic_schemas)
    last_field_id    INTEGER NOT NULL DEFAULT 0   -- the last field id given (0: none yet)
);

-- Every version of every topic's schema, with field ids (docs/semantics.md, "Schema evolution")
CREATE TABLE topic_schemas (
    topic_id      BIGINT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    version       INTEGER NOT NULL CHECK (version > 0),
    arrow_schema  TEXT NOT NULL,        -- base64 of the Arrow IPC schema message, with field ids
    created_ms    BIGINT NOT NULL,
    created_by    TEXT NOT NULL,
    PRIMARY KEY (topic_id, version)
);

-- Every alteration of a topic (schema, partitions, configs), with who and when
CREATE TABLE topic_alterations (
    topic_id    BIGINT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq > 0),
    altered_ms  BIGINT NOT NULL,
    altered_by  TEXT NOT NULL,
    changes     TEXT NOT NULL,          -- JSON: what changed (schema, partitions, config)
    PRIMARY KEY (topic_id, seq)
);

CREATE TABLE partitions (
    topic_id          BIGINT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    partition_no      INTEGER NOT NULL,
    high_watermark    BIGINT NOT NULL DEFAULT 0,
    log_start_offset  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition_no)
);

-- Transaction instances: one row per transaction a transactional id ran.
CREATE TABLE transactions (
    txn_id            BIGINT PRIMARY KEY,
    transactional_id  TEXT NOT NULL,
    producer_id       BIGINT NOT NULL,
    producer_epoch    INTEGER NOT NULL,
    timeout_ms        BIGINT NOT NULL,
    start_ms          BIGINT NOT NULL,
    end_ms            BIGINT,
    outcome           TEXT CHECK (outcome IN ('COMMIT', 'ABORT'))
);
CREATE INDEX transactions_by_id ON transactions (transactional_id, txn_id);
CREATE INDEX transactions_open ON transactions (start_ms) WHERE outcome IS NULL;

-- One immutable object in object storage = one contiguous batch of one partition,
-- written by one producer, in at most one transaction.
CREATE TABLE segments (
    topic_id          BIGINT NOT NULL,
    partition_no      INTEGER NOT NULL,
    base_offset       BIGINT NOT NULL,
    record_count      BIGINT NOT NULL CHECK (record_count > 0),
    size_bytes        BIGINT NOT NULL,
    object_key        TEXT NOT NULL UNIQUE,
    producer_id       BIGINT NOT NULL,
    producer_epoch    INTEGER NOT NULL,
    base_sequence     BIGINT NOT NULL,
    txn_id            BIGINT REFERENCES transactions (txn_id),
    max_timestamp_ms  BIGINT NOT NULL,
    created_ms        BIGINT NOT NULL,
    purged_ms         BIGINT,            -- set: aborted and purged by gc (offsets stay occupied)
    schema_version    INTEGER NOT NULL DEFAULT 1,  -- the topic schema version it was encoded in
    row_count         BIGINT,            -- set: compacted (records held; record_count is the
                                         -- offset span, its gaps aborted records; `_offset` stored)
    PRIMARY KEY (topic_id, partition_no, base_offset),
    FOREIGN KEY (topic_id, partition_no) REFERENCES partitions (topic_id, partition_no)
        ON DELETE CASCADE
);
CREATE INDEX segments_by_sequence ON segments (producer_id, topic_id, partition_no, base_sequence);
CREATE INDEX segments_by_txn ON segments (txn_id) WHERE txn_id IS NOT NULL;

-- Idempotence: the last sequence accepted per (producer id, partition).
CREATE TABLE producer_state (
    producer_id     BIGINT NOT NULL,
    topic_id        BIGINT NOT NULL,
    partition_no    INTEGER NOT NULL,
    producer_epoch  INTEGER NOT NULL,
    last_sequence   BIGINT NOT NULL,
    updated_ms      BIGINT NOT NULL,
    PRIMARY KEY (producer_id, topic_id, partition_no),
    FOREIGN KEY (topic_id, partition_no) REFERENCES partitions (topic_id, partition_no)
        ON DELETE CASCADE
);
CREATE INDEX producer_state_by_age ON producer_state (updated_ms);

-- The transaction log: one row per transactional id.
CREATE TABLE transactional_ids (
    transactional_id  TEXT PRIMARY KEY,
    producer_id       BIGINT NOT NULL UNIQUE,
    producer_epoch    INTEGER NOT NULL,
    state             TEXT NOT NULL,
    timeout_ms        BIGINT NOT NULL,
    txn_id            BIGINT REFERENCES transactions (txn_id),
    txn_start_ms      BIGINT,
    last_update_ms    BIGINT NOT NULL,
    state_seq         BIGINT NOT NULL DEFAULT 0,
    created_ms        BIGINT NOT NULL
);
CREATE INDEX transactional_ids_by_state ON transactional_ids (state, last_update_ms);

-- Every state transition of every transactional id, with its time.
CREATE TABLE txn_state_log (
    producer_id       BIGINT NOT NULL,
    seq               BIGINT NOT NULL,
    transactional_id  TEXT NOT NULL,
    producer_epoch    INTEGER NOT NULL,
    txn_id            BIGINT,
    from_state        TEXT NOT NULL,
    to_state          TEXT NOT NULL,
    at_ms             BIGINT NOT NULL,
    reason            TEXT NOT NULL,
    PRIMARY KEY (producer_id, seq)
);
CREATE INDEX txn_state_log_by_id ON txn_state_log (transactional_id, at_ms);

-- The partitions a transaction touched, and its control marker in each once decided.
-- marker IS NULL: still open there (holds the partition's last stable offset back from
-- first_offset). Aborted rows are the per-partition aborted-transaction index.
CREATE TABLE txn_partitions (
    txn_id          BIGINT NOT NULL REFERENCES transactions (txn_id) ON DELETE CASCADE,
    topic_id        BIGINT NOT NULL,
    partition_no    INTEGER NOT NULL,
    first_offset    BIGINT,
    last_offset     BIGINT,
    record_count    BIGINT NOT NULL DEFAULT 0,
    size_bytes      BIGINT NOT NULL DEFAULT 0,
    marker          TEXT CHECK (marker IN ('COMMIT', 'ABORT')),
    marker_offset   BIGINT,
    marker_ms       BIGINT,
    purged_ms       BIGINT,              -- set: gc purged this aborted entry's segments
    PRIMARY KEY (txn_id, topic_id, partition_no),
    FOREIGN KEY (topic_id, partition_no) REFERENCES partitions (topic_id, partition_no)
        ON DELETE CASCADE
);
CREATE INDEX txn_partitions_open ON txn_partitions (topic_id, partition_no, first_offset)
    WHERE marker IS NULL;
CREATE INDEX txn_partitions_aborted ON txn_partitions (topic_id, partition_no, first_offset)
    WHERE marker = 'ABORT';
CREATE INDEX txn_partitions_unpurged_aborts ON txn_partitions (txn_id)
    WHERE marker = 'ABORT' AND purged_ms IS NULL;

-- Group offsets sent inside a transaction; applied to group_offsets when it commits.
CREATE TABLE txn_offsets (
    txn_id            BIGINT NOT NULL REFERENCES transactions (txn_id) ON DELETE CASCADE,
    group_id          TEXT NOT NULL,
    topic_id          BIGINT NOT NULL,
    partition_no      INTEGER NOT NULL,
    committed_offset  BIGINT NOT NULL CHECK (committed_offset >= 0),
    metadata          TEXT,              -- 0008: the commit's metadata, a JSON string (NULL: none)
    leader_epoch      INTEGER,           -- 0008: the commit's leader epoch (NULL: none)
    PRIMARY KEY (txn_id, group_id, topic_id, partition_no),
    FOREIGN KEY (topic_id, partition_no) REFERENCES partitions (topic_id, partition_no)
        ON DELETE CASCADE
);

-- Consumer groups: the next offset to read, per partition.
CREATE TABLE group_offsets (
    group_id          TEXT NOT NULL,
    topic_id          BIGINT NOT NULL,
    partition_no      INTEGER NOT NULL,
    committed_offset  BIGINT NOT NULL CHECK (committed_offset >= 0),
    commit_ms         BIGINT NOT NULL,
    txn_id            BIGINT,
    metadata          TEXT,              -- 0008: the commit's metadata, a JSON string (NULL: none)
    leader_epoch      INTEGER,           -- 0008: the commit's leader epoch (NULL: none)
    PRIMARY KEY (group_id, topic_id, partition_no),
    FOREIGN KEY (topic_id, partition_no) REFERENCES partitions (topic_id, partition_no)
        ON DELETE CASCADE
);

-- Objects whose metadata is gone (aborted and purged, or truncated by retention), deleted
-- by gc once requested_ms is older than its delete delay, so in-flight reads finish first.
CREATE TABLE object_deletions (
    object_key    TEXT PRIMARY KEY,
    reason        TEXT NOT NULL,
    requested_ms  BIGINT NOT NULL
);
CREATE INDEX object_deletions_by_age ON object_deletions (requested_ms);

-- The Kafka-protocol listeners that are up (txn-broker serve), with their heartbeats
CREATE TABLE kafka_listeners (
    node_id       INTEGER PRIMARY KEY,
    host          TEXT NOT NULL,
    port          INTEGER NOT NULL,
    heartbeat_ms  BIGINT NOT NULL,
    started_ms    BIGINT NOT NULL,
    UNIQUE (host, port)
);

-- The default Iceberg catalog (pyiceberg's SQL catalog, same columns and keys as its own
-- DDL): a table's current metadata file, and namespace properties (docs/iceberg.md)
CREATE TABLE iceberg_tables (
    catalog_name                VARCHAR(255) NOT NULL,
    table_namespace             VARCHAR(255) NOT NULL,
    table_name                  VARCHAR(255) NOT NULL,
    metadata_location           VARCHAR(1000),
    previous_metadata_location  VARCHAR(1000),
    iceberg_type                VARCHAR(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);

CREATE TABLE iceberg_namespace_properties (
    catalog_name    VARCHAR(255) NOT NULL,
    namespace       VARCHAR(255) NOT NULL,
    property_key    VARCHAR(255) NOT NULL,
    property_value  VARCHAR(1000) NOT NULL,
    PRIMARY KEY (catalog_name, namespace, property_key)
);

-- Transaction ids on PostgreSQL: nextval takes no row lock, so concurrent transaction
-- starts do not queue on a counter row.
-- only on postgresql
CREATE SEQUENCE txn_ids AS BIGINT;

INSERT INTO counters (name, value) VALUES ('producer_id', 0);
INSERT INTO counters (name, value) VALUES ('topic_id', 0);
-- only on sqlite
INSERT INTO counters (name, value) VALUES ('txn_id', 0);

-- Kafka's ACLs (0009), enforced by every `txn-broker serve` of the database: Kafka's codes for
-- the resource type, pattern type (3 literal, 4 prefixed), operation and permission (2 deny,
-- 3 allow).
CREATE TABLE kafka_acls (
    resource_type  INTEGER NOT NULL,
    resource_name  TEXT NOT NULL,
    pattern_type   INTEGER NOT NULL,
    principal      TEXT NOT NULL,
    host           TEXT NOT NULL,
    operation      INTEGER NOT NULL,
    permission     INTEGER NOT NULL,
    created_ms     BIGINT NOT NULL,
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission)
);
