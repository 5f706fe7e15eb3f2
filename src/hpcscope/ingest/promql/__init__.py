"""The Prometheus HTTP API's answers (``/api/v1/query_range``) -> hpcscope's Arrow tables.

Formats only, no HTTP: the calls are made by :mod:`hpcscope.service.backends`.
"""

from hpcscope.ingest.promql.matrix import (
    PromqlResponseError,
    dcgm_matrix_to_samples,
    dcgm_series_selector,
)

__all__ = ["PromqlResponseError", "dcgm_matrix_to_samples", "dcgm_series_selector"]
