"""Storage: the only package that imports duckdb.

:class:`~hpcscope.store.duck.Store` owns one DuckDB file with a single writer thread; the
query methods return Arrow tables constrained by a :class:`~hpcscope.model.access.JobScope`.
"""

from hpcscope.model.errors import StoreError
from hpcscope.store.duck import Store, StoreClosedError

__all__ = ["Store", "StoreClosedError", "StoreError"]
