-- 0005: schema versions and field ids (docs/semantics.md, "Schema evolution"). Every
-- version of a topic's schema is kept in topic_schemas; topics keeps the latest, its
-- number and the last field id given; each segment records the version it was encoded in;
-- topic_alterations records every `alter_topic` with who and when.
-- Topics that existed before become version 1. Their stored schemas carry no field ids:
-- a schema without ids reads as assign_fresh_ids of itself (txn_broker.topic_schemas),
-- deterministic, so no Python step is needed here; last_field_id 0 means "not given yet".
ALTER TABLE topics ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE topics ADD COLUMN last_field_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE segments ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 1;

CREATE TABLE topic_schemas (
    topic_id      BIGINT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    version       INTEGER NOT NULL CHECK (version > 0),
    arrow_schema  TEXT NOT NULL,        -- base64 of the Arrow IPC schema message, with field ids
    created_ms    BIGINT NOT NULL,
    created_by    TEXT NOT NULL,
    PRIMARY KEY (topic_id, version)
);

INSERT INTO topic_schemas (topic_id, version, arrow_schema, created_ms, created_by)
SELECT topic_id, 1, arrow_schema, created_ms, 'migration 0005' FROM topics;

CREATE TABLE topic_alterations (
    topic_id    BIGINT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq > 0),
    altered_ms  BIGINT NOT NULL,
    altered_by  TEXT NOT NULL,
    changes     TEXT NOT NULL,          -- JSON: what changed (schema, partitions, config)
    PRIMARY KEY (topic_id, seq)
);
