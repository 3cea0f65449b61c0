"""Benchmarks of issue 9: every figure a ratio against a baseline measured in the same run
on the same data and storage, or a latency percentile. Run with ``make bench``."""
