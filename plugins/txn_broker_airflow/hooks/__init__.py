"""Hooks: connections to the broker."""
