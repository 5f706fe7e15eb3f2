"""Analysis: pure functions over columnar data.

No I/O, no clock, no randomness without a seed, no printing, no plotting. Inputs and outputs are
Arrow tables, Polars frames or frozen dataclasses with documented columns.
"""
