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
    JobIdText,
    SchedulerFormatError,
    SchedulerSnapshot,
    canonical_job_id,
    normalize_state,
    parse_job_id_text,
)
from hpcscope.ingest.slurm.gres import (
    GresEntry,
    gpus_from_tres_list,
    gpus_from_tres_string,
    parse_gres,
)
from hpcscope.ingest.slurm.inventory import InventorySnapshot, SlurmNode, SlurmPartition
from hpcscope.ingest.slurm.parsable import (
    HPCSCOPE_FIELDS,
    XDMOD_FIELDS,
    SacctParse,
    SacctRecord,
    parse_sacct_parsable2,
)
from hpcscope.ingest.slurm.rest import (
    GresIndexResolver,
    parse_slurmrestd_jobs,
    parse_slurmrestd_nodes,
    parse_slurmrestd_partitions,
    physical_gpu_indices,
)
from hpcscope.ingest.slurm.sacct_json import parse_sacct_json
from hpcscope.ingest.slurm.sacctmgr import (
    SacctmgrRows,
    account_memberships,
    parse_sacctmgr_parsable,
)
from hpcscope.ingest.slurm.text import (
    SINFO_NODE_FIELDS,
    SQUEUE_FIELDS,
    parse_sinfo_nodes_text,
    parse_sinfo_partitions_text,
    parse_squeue_text,
    squeue_format_argument,
)

__all__ = [
    "HPCSCOPE_FIELDS",
    "SINFO_NODE_FIELDS",
    "SQUEUE_FIELDS",
    "XDMOD_FIELDS",
    "GresEntry",
    "GresIndexResolver",
    "InventorySnapshot",
    "JobIdText",
    "SacctParse",
    "SacctRecord",
    "SacctmgrRows",
    "SchedulerFormatError",
    "SchedulerSnapshot",
    "SlurmNode",
    "SlurmPartition",
    "account_memberships",
    "canonical_job_id",
    "gpus_from_tres_list",
    "gpus_from_tres_string",
    "normalize_state",
    "parse_gres",
    "parse_job_id_text",
    "parse_sacct_json",
    "parse_sacct_parsable2",
    "parse_sacctmgr_parsable",
    "parse_sinfo_nodes_text",
    "parse_sinfo_partitions_text",
    "parse_slurmrestd_jobs",
    "parse_slurmrestd_nodes",
    "parse_slurmrestd_partitions",
    "parse_squeue_text",
    "physical_gpu_indices",
    "squeue_format_argument",
]
