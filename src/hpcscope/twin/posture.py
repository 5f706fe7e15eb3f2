"""What a node's daily posture check writes, as node_exporter serves it.

``deploy/posture/hpcscope-posture`` runs on each node (a systemd timer) and writes
``hpcscope_posture.prom`` into node_exporter's textfile directory; node_exporter serves those
series on its ``/metrics`` with ``node_textfile_mtime_seconds`` for the file.
:func:`posture_page` renders that part of the page for a twin node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

TEXTFILE = "/var/lib/prometheus/node-exporter/hpcscope_posture.prom"

#: A patched node (fixed releases of the security reference's advisories).
PATCHED: Mapping[str, str] = {
    "torch": "2.6.0+cu124",
    "nvidia-container-toolkit": "1.17.8",
    "libnvidia-container": "1.17.8",
    "runc": "1.2.8",
    "apptainer": "1.3.6",
}
FLAG_NAMES = (
    "pip_extra_index_url", "ray_jobs_api_exposed", "privileged_containers", "setuid_apptainer",
    "gpu_sharing_on_sensitive", "epilog_without_gpu_reset", "nvlink_counters_user_readable",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class NodeCheck:
    """One run of the check: versions found, facts raised, datasets seen."""

    checked_at_seconds: float
    versions: Mapping[str, str] = field(default_factory=lambda: dict(PATCHED))
    raised: frozenset[str] = frozenset()
    datasets: Mapping[str, tuple[str, bool]] = field(default_factory=dict)
    """root -> (URL list, whether it carries per-item hashes)."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def posture_textfile(check: NodeCheck) -> str:
    """The check's ``.prom`` file (the format of ``deploy/posture/hpcscope-posture``)."""
    lines = [
        "# HELP hpcscope_posture_checked_timestamp_seconds When the posture check ran.",
        "# TYPE hpcscope_posture_checked_timestamp_seconds gauge",
        f"hpcscope_posture_checked_timestamp_seconds {check.checked_at_seconds:.0f}",
        "# HELP hpcscope_posture_version_info Installed version of a package the posture rules "
        "check.",
        "# TYPE hpcscope_posture_version_info gauge",
    ]
    lines += [
        f'hpcscope_posture_version_info{{package="{_escape(p)}",version="{_escape(v)}"}} 1'
        for p, v in sorted(check.versions.items())
    ]
    lines += [
        "# HELP hpcscope_posture_flag A posture fact that must be false (1 true, 0 false).",
        "# TYPE hpcscope_posture_flag gauge",
    ]
    lines += [
        f'hpcscope_posture_flag{{flag="{f}"}} {1 if f in check.raised else 0}' for f in FLAG_NAMES
    ]
    if check.datasets:
        lines += [
            "# HELP hpcscope_posture_dataset_item_hashes Whether a dataset's URL list carries "
            "per-item hashes.",
            "# TYPE hpcscope_posture_dataset_item_hashes gauge",
        ]
        lines += [
            f'hpcscope_posture_dataset_item_hashes{{root="{_escape(root)}",'
            f'url_list="{_escape(urls)}"}} {1 if hashed else 0}'
            for root, (urls, hashed) in sorted(check.datasets.items())
        ]
    return "\n".join(lines) + "\n"


def posture_page(check: NodeCheck, *, written_at_seconds: float) -> str:
    """node_exporter's page as far as the textfile collector goes: the file's series, its
    mtime and the collector's error gauge."""
    return posture_textfile(check) + (
        "# HELP node_textfile_mtime_seconds Unixtime mtime of textfiles successfully read.\n"
        "# TYPE node_textfile_mtime_seconds gauge\n"
        f'node_textfile_mtime_seconds{{file="{TEXTFILE}"}} {written_at_seconds:.0f}\n'
        "# HELP node_textfile_scrape_error 1 if there was an error opening or reading a file, "
        "0 otherwise\n"
        "# TYPE node_textfile_scrape_error gauge\n"
        "node_textfile_scrape_error 0\n"
    )
