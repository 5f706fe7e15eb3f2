"""The sample-weight rule of :mod:`hpcscope.model.sampling`, and every caller agreeing on it.

Useful GPU-seconds of one job, on the same stored samples, from: the job report
(``Service.job_report``), the diagram's cost figures (``service.diagram.cost``, SQL in the
store), hpcscope's ``/metrics`` (``serve.metrics``) and the CLI's JSON (``hpcscope job ID
--json``). Samples go through the real store (DuckDB in a temporary directory) with random
intervals, gaps longer than the cap, unknown SM activity and energy counter resets.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from hpcscope.analysis.jobs.attribution import attribute_gpu_samples
from hpcscope.cli.main import app
from hpcscope.ingest.exporters.dcgm import dcgm_page_to_samples
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.ingest.slurm.jobmap import read_mapping_dir
from hpcscope.model.access import JobScope, system_principal
from hpcscope.model.sampling import (
    GAP_SCRAPE_INTERVALS,
    NO_JOB_LABELS,
    has_job_sql,
    job_id_from_label,
    max_sample_weight_seconds,
    sample_weights,
)
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.metrics import metrics_registry
from hpcscope.service.core import Service
from hpcscope.service.diagram.cost import decision_view
from hpcscope.service.diagram.live import Viewer
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from hpcscope.store import diagram as diagram_queries
from hpcscope.store import reports as reports_queries
from tests.support.dcgm_pages import render_dcgm_page
from tests.support.servers import live_server

JOB = "7"
#: The offline CLI reads a store with the default settings: the test uses the same interval.
SCRAPE_SECONDS = Settings.model_fields["scrape_interval_seconds"].default
CAP_SECONDS = max_sample_weight_seconds(SCRAPE_SECONDS)
runner = CliRunner()


def test_the_cap_is_three_scrape_intervals() -> None:
    assert GAP_SCRAPE_INTERVALS == 3
    assert max_sample_weight_seconds(15.0) == 45.0
    with pytest.raises(ValueError, match="scrape interval must be positive, got 0"):
        max_sample_weight_seconds(0)


def test_no_job_labels() -> None:
    assert frozenset({"", "0"}) == NO_JOB_LABELS
    assert [job_id_from_label(v) for v in (None, "", "0", "42", " 42")] == [
        None,
        None,
        None,
        "42",
        " 42",
    ]
    assert has_job_sql("s.job_id") == "coalesce(s.job_id NOT IN ('', '0'), FALSE)"


@dataclass(frozen=True)
class Sample:
    gpu: int
    offset_ms: int  # after the first sample of the job
    sm_active_ratio: float | None
    energy_joules: float


def reference_useful_seconds(samples: list[Sample]) -> float:
    """The rule of :func:`~hpcscope.model.sampling.sample_weights` over each GPU's series:
    weight x SM activity, unknown activity counting for nothing."""
    total = 0.0
    for gpu in {s.gpu for s in samples}:
        series = sorted((s for s in samples if s.gpu == gpu), key=lambda s: s.offset_ms)
        times = [s.offset_ms / 1000 for s in series]
        weights = sample_weights(times, max_interval_seconds=CAP_SECONDS)
        for sample, weight in zip(series, weights, strict=True):
            sm = sample.sm_active_ratio
            if sm is not None and not math.isnan(sm):
                total += weight * sm
    return total


def store_samples(service: Service, samples: list[Sample], *, last: datetime) -> None:
    """Write the job's scheduler record and ``samples``, the latest one stamped ``last``."""
    end_ms = max(s.offset_ms for s in samples)
    start = last - timedelta(milliseconds=end_ms)
    job = {
        "job_id": JOB,
        "user": "alice",
        "account": "vision",
        "partition": "gpu",
        "state": "RUNNING",
        "start_time": start,
        "gpus": len({s.gpu for s in samples}),
        "nodes": "gpu01",
        "name": "agreement",
        "source": "test",
    }
    service.store.upsert_jobs(pa.Table.from_pylist([job], schema=JOB_SCHEMA)).result()
    rows = [
        {
            "ts": start + timedelta(milliseconds=s.offset_ms),
            "node": "gpu01",
            "gpu": s.gpu,
            "job_id": JOB,
            "reported_util_ratio": 1.0,
            "sm_active_ratio": s.sm_active_ratio,
            "energy_joules": s.energy_joules,
        }
        for s in samples
    ]
    table = pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)
    service.store.append("gpu_samples", table).result()


@dataclass(frozen=True)
class Figures:
    report: float
    diagram: float
    metrics: float
    cli: float


def useful_seconds_everywhere(path: Path, samples: list[Sample]) -> tuple[Figures, float]:
    """Useful GPU-seconds of :data:`JOB` from every caller, and the report's energy."""
    service = Service.open(Settings(store_path=path), users=UserDirectory([]))
    try:
        now = utcnow()
        store_samples(service, samples, last=now - timedelta(seconds=5))
        admin = system_principal("test")
        report = service.job_report(admin, JOB, now=now)
        assert report is not None
        cost = decision_view(service, Viewer(None), now=now).cluster
        text = generate_latest(metrics_registry(service)).decode()
        metric = [
            s.value
            for family in text_string_to_metric_families(text)
            if family.name == "hpcscope_job_useful_gpu_seconds"
            for s in family.samples
            if s.labels["job_id"] == JOB
        ]
        assert len(metric) == 1, text
    finally:
        service.close()
    result = runner.invoke(app, ["job", JOB, "--store", str(path), "--json"])
    assert result.exit_code == 0, result.output
    cli = json.loads(result.stdout)["useful_gpu_hours"] * 3600
    figures = Figures(report.useful_gpu_hours * 3600, cost.useful_gpu_hours * 3600, metric[0], cli)
    return figures, report.energy_joules or 0.0


def assert_agree(figures: Figures, expected: float) -> None:
    for name, value in vars(figures).items():
        assert value == pytest.approx(expected, rel=1e-9, abs=1e-6), (name, figures, expected)


def test_105_versus_15_is_fixed(tmp_path: Path) -> None:
    """The issue's case: two samples 15 s apart, then a 285 s silence, SM fully active.

    The job report clipped the gap to the 45 s cap (15 + 45 + 45 = 105 GPU-seconds, the last
    sample weighing the median interval, capped); the diagram counted the gap and the last
    sample as zero (15). Both now say 105, and so do /metrics and the CLI."""
    samples = [Sample(0, 0, 1.0, 0.0), Sample(0, 15_000, 1.0, 10.0), Sample(0, 300_000, 1.0, 20.0)]
    assert reference_useful_seconds(samples) == 105.0
    figures, _ = useful_seconds_everywhere(tmp_path / "store.duckdb", samples)
    assert_agree(figures, 105.0)


def test_the_cli_over_http_says_the_same(tmp_path: Path) -> None:
    samples = [Sample(0, 0, 1.0, 0.0), Sample(0, 15_000, 1.0, 10.0), Sample(0, 300_000, 1.0, 20.0)]
    settings_ = Settings(store_path=tmp_path / "s.duckdb", secret_key="k")
    service = Service.open(settings_, users=UserDirectory.demo())
    try:
        store_samples(service, samples, last=utcnow() - timedelta(seconds=5))
        with live_server(create_app(service)) as url:
            login = ["--url", url, "--user", "admin", "--password", "admin-demo", "--json"]
            result = runner.invoke(app, ["job", JOB, *login])
    finally:
        service.close()
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["useful_gpu_hours"] * 3600 == pytest.approx(105.0)


@st.composite
def job_samples(draw: st.DrawFn) -> tuple[list[Sample], float]:
    """One or two GPUs of one job: intervals around the scrape interval, some at the cap
    exactly, some gaps far longer; SM activity sometimes unknown (null or NaN); an energy
    counter with resets. Returns the samples and the energy the job really used."""
    cap_ms = int(CAP_SECONDS * 1000)
    step = st.one_of(st.integers(1, cap_ms), st.just(cap_ms), st.integers(cap_ms + 1, 20 * cap_ms))
    samples: list[Sample] = []
    used = 0.0
    for gpu in range(draw(st.integers(1, 2))):
        offset, energy = draw(st.integers(0, cap_ms)), draw(st.floats(0, 1e6))
        for index in range(draw(st.integers(1, 12))):
            if index:
                offset += draw(step)
                if draw(st.integers(0, 4)) == 0 and energy > 1:  # the counter was reset
                    energy = draw(st.floats(0, energy / 2))
                    used += energy
                else:
                    added = draw(st.floats(0, 1e4))
                    energy += added
                    used += added
            sm = draw(st.one_of(st.none(), st.just(math.nan), st.floats(0, 1)))
            samples.append(Sample(gpu, offset, sm, energy))
    return samples, used


@pytest.fixture(scope="module")
def store_paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh store file per Hypothesis example (a function-scoped tmp_path is not)."""
    root = tmp_path_factory.mktemp("agreement")
    return (root / f"store-{i}.duckdb" for i in range(10**6))


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(job_samples())
def test_useful_gpu_seconds_agree_everywhere(
    store_paths: Iterator[Path], case: tuple[list[Sample], float]
) -> None:
    samples, used_joules = case
    figures, energy = useful_seconds_everywhere(next(store_paths), samples)
    assert_agree(figures, reference_useful_seconds(samples))
    assert energy == pytest.approx(used_joules, rel=1e-9, abs=1e-6)


def test_every_reader_agrees_on_which_gpus_have_no_job(tmp_path: Path) -> None:
    """The same labels mean "no job" to dcgm ingest, the mapping files, attribution and the
    store's queries (rows another tool wrote with a raw label included)."""
    labels = ["", "0", "4242"]
    expected = [job_id_from_label(label) for label in labels]
    assert expected == [None, None, "4242"]
    # dcgm-exporter's hpc_job label
    text = render_dcgm_page(
        "gpu01", rng=random.Random(1), gpus=3, jobs={str(g): [v] for g, v in enumerate(labels)}
    )
    parser = ExpositionParser()
    page = parser.parse(text, source="http://gpu01:9400/metrics")
    dcgm = dcgm_page_to_samples(page, parser.series, ts=datetime(2026, 1, 1)).table
    by_gpu = dict(
        zip(dcgm.column("gpu").to_pylist(), dcgm.column("job_id").to_pylist(), strict=True)
    )
    assert [by_gpu[g] for g in range(3)] == expected
    # the prolog's mapping files
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    for gpu, label in enumerate(labels):
        (mapping / str(gpu)).write_text(label + "\n")
    rows = read_mapping_dir(mapping, node="gpu01").rows
    mapped = dict(
        zip(rows.column("gpu").to_pylist(), rows.column("job_id").to_pylist(), strict=True)
    )
    assert [mapped.get(g) for g in range(3)] == expected
    # attribution of a platform label, with no allocation
    now = utcnow()
    raw = pa.Table.from_pylist(
        [
            {"ts": now, "node": "gpu01", "gpu": g, "job_id": label, "sm_active_ratio": 1.0}
            for g, label in enumerate(labels)
        ],
        schema=GPU_SAMPLE_SCHEMA,
    )
    attributed = attribute_gpu_samples(
        raw.append_column("platform_job_id", raw.column("job_id")),
        JOB_ALLOCATION_SCHEMA.empty_table(),
    ).samples
    assert attributed.sort_by("gpu").column("job_id").to_pylist() == expected
    # the store's queries over raw rows
    with Store(tmp_path / "store.duckdb") as store:
        store.append("gpu_samples", raw).result()
        since = now - timedelta(minutes=1)
        everyone = JobScope(all_jobs=True)
        assert reports_queries.job_ids_in_samples(store, everyone, since=since) == ["4242"]
        recent = diagram_queries.recent_job_samples(store, scope=everyone, since=since)
        assert recent.column("job_id").to_pylist() == ["4242"]
        held = diagram_queries.gpu_time(
            store, scope=everyone, since=since, until=now + timedelta(seconds=1),
            max_interval_seconds=CAP_SECONDS,
        )  # fmt: skip
        assert held.jobs == 1 and held.useful_seconds == pytest.approx(CAP_SECONDS)
