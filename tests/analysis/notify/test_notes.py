"""Job notes: each rule fires on the job it describes, says the figure, threshold and advice,
and stays quiet on a healthy job."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.notify.facts import GpuFacts, JobFacts
from hpcscope.analysis.notify.notes import NOTE_IDS, NoteLevel, NoteThresholds, job_notes

GIB = 2**30


def gpu(i: int, sm: float | None, util: float | None, **kw: object) -> GpuFacts:
    return GpuFacts(
        node="gpu01",
        gpu=i,
        verdict=str(kw.pop("verdict", "healthy")),
        sm_active_ratio=sm,
        reported_util_ratio=util,
        max_fb_used_bytes=kw.pop("fb", 40 * GIB),  # type: ignore[arg-type]
        fb_total_bytes=80 * GIB,
        **kw,  # type: ignore[arg-type]
    )


def job(*gpus: GpuFacts, elapsed: float = 3600.0, state: str = "RUNNING") -> JobFacts:
    known = [g.sm_active_ratio for g in gpus if g.sm_active_ratio is not None]
    utils = [g.reported_util_ratio for g in gpus if g.reported_util_ratio is not None]
    return JobFacts(
        job_id="42",
        user="alice",
        account="vision",
        state=state,
        elapsed_seconds=elapsed,
        gpus_allocated=len(gpus),
        sm_active_ratio=sum(known) / len(known) if known else None,
        reported_util_ratio=sum(utils) / len(utils) if utils else None,
        gpus=gpus,
    )


def ids(facts: JobFacts) -> list[str]:
    return [n.rule_id for n in job_notes(facts)]


def test_a_healthy_job_has_no_note() -> None:
    assert ids(job(gpu(0, 0.8, 0.99), gpu(1, 0.78, 0.98))) == []


def test_unused_gpus_is_an_error_and_replaces_low_efficiency() -> None:
    notes = job_notes(job(gpu(0, 0.0, 0.0), gpu(1, 0.01, 0.0)))
    assert [n.rule_id for n in notes] == ["unused-gpus"]
    assert notes[0].level is NoteLevel.ERROR
    assert "did not use its 2 GPU(s)" in notes[0].problem
    assert notes[0].threshold == "a GPU is idle at or under 5 % SM active and utilization"


def test_over_requested_names_the_idle_gpus_and_the_count_to_ask_for() -> None:
    notes = job_notes(job(gpu(0, 0.8, 0.99), gpu(1, 0.0, 0.0), gpu(2, 0.0, 0.01), gpu(3, 0.8, 1)))
    note = next(n for n in notes if n.rule_id == "over-requested-gpus")
    assert note.gpus == ("gpu01 GPU 1", "gpu01 GPU 2")
    assert "2 of the 4 allocated GPUs did no work" in note.problem
    assert "--gpus=2" in note.advice


def test_low_real_efficiency_quotes_real_and_reported() -> None:
    note = job_notes(job(gpu(0, 0.12, 0.97), gpu(1, 0.14, 0.99)))[0]
    assert note.rule_id == "low-real-efficiency"
    assert "13 %" in note.problem and "98 %" in note.problem
    assert note.threshold == "real efficiency under 25 %"
    assert note.figures["sm_active_ratio"] == 0.13


def test_data_starved_when_kernels_run_a_fraction_of_the_time() -> None:
    notes = ids(job(gpu(0, 0.2, 0.4), gpu(1, 0.22, 0.35)))
    assert "data-starved" in notes and "low-real-efficiency" in notes


def test_straggler_note_says_throttled() -> None:
    slow = gpu(3, 0.9, 0.99, verdict="straggler", peer_sm_active_ratio=0.4,
               thermal_throttled=True, max_temperature_celsius=91.0)  # fmt: skip
    peers = [gpu(i, 0.4, 0.99, verdict="waiting_at_barrier") for i in range(3)]
    note = next(n for n in job_notes(job(*peers, slow)) if n.rule_id == "straggler-gpu")
    assert note.gpus == ("gpu01 GPU 3",)
    assert "91 °C" in note.problem and "40 % SM active" in note.problem


def test_memory_headroom_both_ways() -> None:
    full = job_notes(job(gpu(0, 0.8, 0.99, fb=79 * GIB)))
    assert [(n.rule_id, n.level) for n in full] == [("memory-headroom", NoteLevel.WARNING)]
    assert "79.0 GiB of 80.0 GiB" in full[0].problem
    empty = job_notes(job(gpu(0, 0.8, 0.99, fb=8 * GIB)))
    assert [(n.rule_id, n.level) for n in empty] == [("memory-headroom", NoteLevel.INFO)]
    assert "10 %" in empty[0].problem


def test_xid_note_first_and_names_the_end_state() -> None:
    notes = job_notes(job(gpu(0, 0.8, 0.99, xid=79), gpu(1, 0.0, 0.0), state="FAILED"))
    assert notes[0].rule_id == "gpu-xid"
    assert "Xid 79 on gpu01 GPU 0 and the job ended FAILED" in notes[0].problem


def test_short_jobs_get_no_efficiency_note() -> None:
    assert ids(job(gpu(0, 0.0, 0.0), elapsed=120)) == []


def test_thresholds_are_data() -> None:
    facts = job(gpu(0, 0.3, 0.99))
    assert ids(facts) == []
    notes = job_notes(facts, thresholds=NoteThresholds(low_efficiency_sm_ratio=0.5))
    assert [n.rule_id for n in notes] == ["low-real-efficiency"]
    assert notes[0].threshold == "real efficiency under 50 %"


ratios = st.one_of(st.none(), st.floats(0, 1))


@given(st.lists(st.tuples(ratios, ratios, st.floats(0, 80)), min_size=1, max_size=8))
def test_notes_are_known_unique_and_ordered(
    specs: list[tuple[float | None, float | None, float]],
) -> None:
    facts = job(*[gpu(i, sm, util, fb=fb * GIB) for i, (sm, util, fb) in enumerate(specs)])
    notes = job_notes(facts)
    assert len({n.rule_id for n in notes}) == len(notes)
    assert all(n.rule_id in NOTE_IDS and n.problem and n.threshold and n.advice for n in notes)
    levels = [list(NoteLevel).index(n.level) for n in notes]
    assert levels == sorted(levels)
    # the order of the GPUs does not change what is said about the job
    reversed_notes = job_notes(replace(facts, gpus=tuple(reversed(facts.gpus))))
    assert {n.rule_id for n in reversed_notes} == {n.rule_id for n in notes}
