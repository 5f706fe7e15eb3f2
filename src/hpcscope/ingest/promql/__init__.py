"""The Prometheus HTTP API's answers (``/api/v1/query``, ``/api/v1/query_range``) -> hpcscope's
types and Arrow tables.

Formats only, no HTTP: the calls are made by :mod:`hpcscope.service.backends`.
"""

from hpcscope.ingest.promql.answer import (
    Answer,
    PromqlResponseError,
    Series,
    decode_answer,
    engine_error,
)
from hpcscope.ingest.promql.matrix import (
    dcgm_matrix_to_samples,
    dcgm_series_selector,
    dcgm_series_to_samples,
    job_matcher,
    promql_string,
    re2_escape,
)

__all__ = [
    "Answer",
    "PromqlResponseError",
    "Series",
    "dcgm_matrix_to_samples",
    "dcgm_series_selector",
    "dcgm_series_to_samples",
    "decode_answer",
    "engine_error",
    "job_matcher",
    "promql_string",
    "re2_escape",
]
