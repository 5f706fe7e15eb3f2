"""Slurm's own records: jobs, allocations, nodes, partitions, associations.

Every parser takes the real output of a Slurm command or slurmrestd endpoint and a ``source``
(URL, command or file) named in its errors, and returns Arrow tables with the schemas of
:mod:`hpcscope.model.schemas` plus warnings. A truncated or malformed document raises
:class:`SchedulerFormatError` (with line and column) and returns nothing; a bad entry inside a
good document is skipped with a warning; an unknown field is read around and warned once.

Job ids follow one rule everywhere (``docs/golden-path.md``): ``"123"``, array task
``"123_4"``, het component ``"123+1"``; raw ids of array tasks and het components are kept in
``SchedulerSnapshot.aliases``.
"""

from hpcscope.ingest.slurm.common import (
    GresEntry,
    JobIdText,
    SchedulerFormatError,
    SchedulerSnapshot,
    canonical_job_id,
    gpus_from_tres_list,
    gpus_from_tres_string,
    normalize_state,
    parse_gres,
    parse_job_id_text,
)
from hpcscope.ingest.slurm.inventory import InventorySnapshot, SlurmNode, SlurmPartition
from hpcscope.ingest.slurm.rest import (
    GresIndexResolver,
    parse_slurmrestd_jobs,
    parse_slurmrestd_nodes,
    parse_slurmrestd_partitions,
    physical_gpu_indices,
)

__all__ = [
    "GresEntry",
    "GresIndexResolver",
    "InventorySnapshot",
    "JobIdText",
    "SchedulerFormatError",
    "SchedulerSnapshot",
    "SlurmNode",
    "SlurmPartition",
    "canonical_job_id",
    "gpus_from_tres_list",
    "gpus_from_tres_string",
    "normalize_state",
    "parse_gres",
    "parse_job_id_text",
    "parse_slurmrestd_jobs",
    "parse_slurmrestd_nodes",
    "parse_slurmrestd_partitions",
    "physical_gpu_indices",
]
