"""Benchmarks: speed and memory targets, measured against the anchor in the same process."""
