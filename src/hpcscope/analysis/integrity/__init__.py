"""Gradient integrity (threat vector 4): per-step signals over ranks and rules GI-1 to GI-4.

Pure functions over the ranks' self-reported records: no I/O, no clock. See
``docs/integrity.md`` for the formulas and their limits.
"""
