"""Triggers: the asynchronous halves of the deferrable sensors (run in the triggerer)."""
