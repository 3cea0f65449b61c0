-- 0007: the tables of the default Iceberg catalog (pyiceberg's SQL catalog on this database;
-- txn_broker/iceberg/catalog.py, docs/iceberg.md), with the same columns and keys pyiceberg
-- 0.12 creates (SqlCatalog.create_tables), made here so that least-privilege roles use them
-- (sql/roles.sql) and pyiceberg never runs DDL.
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
