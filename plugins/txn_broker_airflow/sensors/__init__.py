"""Sensors: wait for committed records, or until no transaction blocks readers."""
