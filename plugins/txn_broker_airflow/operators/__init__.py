"""Operators: a Spark stage in one transaction, ingest into a topic, load into SQL."""
