"""Trace analysis wiring: find, parse and analyse per-rank profiler traces; stored analyses."""
