"""``lfs changelog`` records: the Lustre manual's examples, renames, errors with their position,
and a round trip with the twin's records."""

from __future__ import annotations

from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.exporters.lustre_changelog import parse_changelog
from hpcscope.twin.telemetry_traces import changelog_record

# The record layout of the Lustre Operations Manual ("Working with Changelogs", lfs changelog
# example), with a Slurm jobid (jobid_name=%j:%u:%H) on the second record.
MANUAL = """\
1 02MKDIR 15:15:21.977666834 2018.01.09 0x0 t=[0x200000402:0x1:0x0] j=mkdir.500 ef=0xf \
u=500:500 nid=10.128.11.159@tcp p=[0x200000007:0x1:0x0] pics
2 01CREAT 15:15:36.687592024 2018.01.09 0x0 t=[0x200000402:0x2:0x0] j=4410002:1001:gpu02 \
ef=0xf u=500:500 nid=10.128.11.159@tcp p=[0x200000402:0x1:0x0] chloe.jpg
6 08RENME 15:16:57.467858399 2018.01.09 0x0 t=[0:0x0:0x0] j=mv.500 ef=0xf u=500:500 \
nid=10.128.11.159@tcp p=[0x200000402:0x1:0x0] new.jpg s=[0x200000402:0x4:0x0] \
sp=[0x200000402:0x1:0x0] old.jpg
13 14SATTR 15:17:03.222346157 2018.01.09 0x14 t=[0x200000402:0x5:0x0] j=touch.0 ef=0xf \
u=0:0 nid=0@lo
"""
FIDS = {"[0x200000007:0x1:0x0]": "/lustre", "[0x200000402:0x1:0x0]": "/lustre/pics",
        "[0x200000402:0x5:0x0]": "/lustre/pics/x.jpg"}  # fmt: skip


def test_manual_records() -> None:
    parsed = parse_changelog(MANUAL, mdt="lustre-MDT0000", source="mdt0.changelog",
                             resolve=FIDS.get)  # fmt: skip
    assert parsed.errors == []
    rows = parsed.table.to_pylist()
    assert [(r["record_index"], r["record_type"], r["path"]) for r in rows] == [
        (1, "MKDIR", "/lustre/pics"),
        (2, "CREAT", "/lustre/pics/chloe.jpg"),
        (6, "RENME", "/lustre/pics/new.jpg"),
        (13, "SATTR", "/lustre/pics/x.jpg"),
    ]
    assert rows[0]["ts"] == datetime(2018, 1, 9, 15, 15, 21, 977666)
    assert (rows[1]["job_id"], rows[1]["host"], rows[1]["uid"]) == ("4410002", "gpu02", 500)
    assert rows[0]["job_id"] is None and rows[0]["job_id_raw"] == "mkdir.500"
    assert (rows[2]["source_fid"], rows[2]["source_name"]) == ("[0x200000402:0x4:0x0]", "old.jpg")


def test_bad_lines_are_named_and_the_rest_kept() -> None:
    text = (
        MANUAL.splitlines()[0] + "\nnot a record\n" + "5 01CREAT 15:15:36.1 2018.01.09 0x0 t=[x]\n"
    )
    parsed = parse_changelog(text, mdt="m", source="m.changelog", first_line=10)
    assert parsed.table.num_rows == 1
    assert [(e.line, e.column) for e in parsed.errors] == [(11, 1), (12, 37)]
    assert "t= is not a FID" in parsed.errors[1].message


@settings(max_examples=60, deadline=None)
@given(
    index=st.integers(0, 2**40),
    kind=st.sampled_from(["CREAT", "UNLNK", "RENME", "TRUNC", "MTIME", "LYOUT"]),
    micros=st.integers(0, 10**6 - 1),
    job=st.integers(1, 10**8),
    uid=st.integers(0, 2**31),
    name=st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True),
)
def test_round_trip_with_the_twin(index: int, kind: str, micros: int, job: int, uid: int,
                                  name: str) -> None:  # fmt: skip
    when = datetime(2026, 12, 1, 12, 0, 0, micros)
    line = changelog_record(index, kind, when, target_fid="[0x200000402:0x9:0x0]",
                            jobid=f"{job}:0:gpu01", uid=uid, nid="10.1.0.1@o2ib",
                            parent_fid="[0x200000402:0x1:0x0]", name=name)  # fmt: skip
    row = parse_changelog(line, mdt="m", source="s").table.to_pylist()[0]
    assert (row["record_index"], row["record_type"], row["ts"], row["job_id"], row["uid"],
            row["name"]) == (index, kind, when, str(job), uid, name)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=120), max_size=6))
def test_any_text_gives_records_or_typed_errors(lines: list[str]) -> None:
    """Bad input never raises: every non-blank line is a record or a named error."""
    text = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines)
    parsed = parse_changelog(text, mdt="m", source="s", resolve=lambda fid: None)
    blank = sum(1 for line in text.splitlines() if not line.strip())
    assert parsed.table.num_rows + len(parsed.errors) == len(text.splitlines()) - blank
    assert all(e.source == "s" and e.line is not None for e in parsed.errors)
