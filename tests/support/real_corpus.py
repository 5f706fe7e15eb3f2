"""Score hpcscope's event rules on the labelled real corpus (tests/fixtures/security/real/).

Each source file is one stream (its lines in order, one engine with its state); each line is
its own batch, so the alerts a line raises are known: an attack line is found when one of its
alerts is of its labelled vector at its minimum severity or above; a harmless line is a false
alarm when one of its alerts is HIGH or CRITICAL. The rules are the bundled ones, the Falco
meaning table the bundled one, the dataset root the default topology's. Shared by
``tests/analysis/alerts/test_real_corpus.py`` and ``bench/detection_real.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import yaml

from hpcscope.analysis.alerts.common import JobOwner
from hpcscope.analysis.alerts.events import EventRules
from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.model.alerts import VECTOR_NAMES, Alert, Severity
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA, TETRAGON_EVENT_SCHEMA
from hpcscope.model.topology import load_topology
from hpcscope.service.alerts.falco_meaning import load_falco_meaning, meaning_path
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.security.tetragon_policy import dataset_roots
from hpcscope.service.settings import bundled_topology

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "security" / "real"
TOOLS = ("falco", "tetragon")


@dataclass(frozen=True, slots=True)
class Label:
    """One line's hand label (``labels.yaml``)."""

    tool: str
    file: str
    line: int
    attack: bool
    vector: str | None
    min_severity: Severity | None
    why: str


@dataclass(frozen=True, slots=True)
class Scored:
    """One line and what hpcscope raised on it."""

    label: Label
    alerts: tuple[Alert, ...]

    @property
    def found(self) -> bool:
        """An attack line raised its vector at its minimum severity or above."""
        want = self.label.min_severity
        return want is not None and any(
            VECTOR_NAMES.get(a.vector) == self.label.vector and a.severity >= want
            for a in self.alerts
        )

    @property
    def high(self) -> bool:
        """The line raised HIGH or CRITICAL."""
        return any(a.severity >= Severity.HIGH for a in self.alerts)


def labels() -> list[Label]:
    """Every hand label, in file and line order."""
    data = yaml.safe_load((REAL / "labels.yaml").read_text(encoding="utf-8"))
    found: list[Label] = []
    for tool in TOOLS:
        for file, lines in data[tool].items():
            for line, entry in sorted(lines.items()):
                severity = entry.get("min_severity")
                found.append(
                    Label(
                        tool=tool,
                        file=file,
                        line=int(line),
                        attack=entry["label"] == "attack",
                        vector=entry.get("vector"),
                        min_severity=None if severity is None else Severity.parse(severity),
                        why=entry["why"],
                    )
                )
    return found


def engine() -> EventRules:
    """The event rules as a site with the bundled rules and topology runs them."""
    topology = load_topology(bundled_topology("2x8-h100"))
    return EventRules(
        load_site_rules(None),
        checkpoint_roots=[topology.checkpoint_root],
        dataset_roots=dataset_roots(topology),
        meaning=load_falco_meaning(meaning_path(None)),
    )


def _streams() -> Iterator[tuple[str, Path]]:
    for tool in TOOLS:
        for path in sorted((REAL / tool).glob("*.jsonl")):
            yield tool, path


@dataclass(frozen=True, slots=True)
class InJob:
    """Every line moved into one Slurm job, as the node would show it: each Falco line's
    ``thread.cgroups`` replaced by ``cgroups`` (what ``append_output`` adds), and each Tetragon
    process's ``/proc/<pid>/cgroup`` under ``proc_root`` naming the job (host mode, read by
    :class:`~hpcscope.ingest.security.exec_cache.ExecJobCache`)."""

    job_id: str
    owner: JobOwner
    cgroups: str
    proc_root: Path


def job_proc_tree(root: Path, cgroup: str) -> Path:
    """A proc tree where every process of the Tetragon corpus (and its parent) is in the
    cgroup ``cgroup`` (``0::/system.slice/...``): the ``/proc/<pid>/cgroup`` of each pid."""
    for path in sorted((REAL / "tetragon").glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            event = next(v for k, v in orjson.loads(line).items() if k.startswith("process_"))
            for who in ("process", "parent"):
                pid = (event.get(who) or {}).get("pid")
                if pid:
                    (root / str(pid)).mkdir(parents=True, exist_ok=True)
                    (root / str(pid) / "cgroup").write_text(cgroup + "\n", encoding="utf-8")
    return root


def _in_job(line: bytes, in_job: InJob | None) -> bytes:
    if in_job is None:
        return line
    alert = orjson.loads(line)
    alert.setdefault("output_fields", {})["thread.cgroups"] = in_job.cgroups
    return orjson.dumps(alert)


def score(in_job: InJob | None = None) -> list[Scored]:
    """Every labelled line with the alerts it raised (outside any job, or in ``in_job``)."""
    by_line = {(label.tool, label.file, label.line): label for label in labels()}
    owners = {} if in_job is None else {in_job.job_id: in_job.owner}
    scored: list[Scored] = []
    for tool, path in _streams():
        rules = engine()
        jobs = None if in_job is None else ExecJobCache(proc_root=in_job.proc_root)
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            label = by_line[(tool, path.name, number)]
            if tool == "falco":
                falco = parse_falco_lines(
                    [_in_job(line, in_job)], source=path.name, first_line=number
                ).table
                tetragon = TETRAGON_EVENT_SCHEMA.empty_table()
            else:
                falco = FALCO_ALERT_SCHEMA.empty_table()
                tetragon = parse_tetragon_lines(
                    [line], source=path.name, first_line=number, jobs=jobs
                ).table
            verdict = rules.evaluate(falco, tetragon, owners=owners)
            scored.append(Scored(label, tuple(verdict.alerts)))
    return scored
