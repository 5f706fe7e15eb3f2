"""lustre_job_stats: the migration matches the schema, re-reads add nothing, filters work."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.lustre_jobstats import parse_job_stats
from hpcscope.model.schemas import LUSTRE_JOB_STATS_SCHEMA
from hpcscope.store import Store
from hpcscope.store.lustre import append_job_stats, job_stats
from tests.support.paths import FIXTURES

LCTL = FIXTURES / "lustre" / "lctl_get_param_job_stats_lustre2.14_slurm_jobids_whamcloud.txt"
PROC = FIXTURES / "lustre" / "mdt_job_stats_lustre_exporter_fixture.yaml"


def _ost(server: str = "oss1") -> pa.Table:
    return parse_job_stats(LCTL.read_text(), source=str(LCTL), server=server)


def _mdt() -> pa.Table:
    return parse_job_stats(PROC.read_text(), source=str(PROC), server="mds1")  # target null


def test_stored_table_matches_the_schema(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        stored = store.query("SELECT * FROM lustre_job_stats LIMIT 0").schema
        assert stored.names == LUSTRE_JOB_STATS_SCHEMA.names
        assert job_stats(store).schema == LUSTRE_JOB_STATS_SCHEMA


def test_reading_the_same_snapshot_again_stores_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        assert append_job_stats(store, _ost()).result() == 240
        assert append_job_stats(store, _ost()).result() == 0  # the spool file read again
        assert append_job_stats(store, _mdt()).result() == 240
        assert append_job_stats(store, _mdt()).result() == 0  # null target is still a key
        assert append_job_stats(store, _ost("oss2")).result() == 240  # another server
        twice = pa.concat_tables([_mdt(), _mdt()])
        assert append_job_stats(store, twice).result() == 0
        assert store.query("SELECT count(*) AS n FROM lustre_job_stats").to_pylist() == [{"n": 720}]


def test_a_new_snapshot_of_one_job_adds_only_its_rows(tmp_path: Path) -> None:
    text = LCTL.read_text()
    moved = text.replace(
        "snapshot_time:   1723114647.887515895", "snapshot_time:   1723114707.000000001"
    )
    assert moved != text
    with Store(tmp_path / "s.duckdb") as store:
        append_job_stats(store, _ost()).result()
        later = parse_job_stats(moved, source="later", server="oss1")
        assert append_job_stats(store, later).result() == 15  # job 10's operations only
        rows = job_stats(store, job_ids=["10"])
        assert rows.num_rows == 30 + 15  # quoted id: 2 snapshots; bare SLURM_JOB10: 1


def test_filters_and_order(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        append_job_stats(store, _mdt()).result()
        append_job_stats(store, _ost("oss2")).result()
        append_job_stats(store, _ost("oss1")).result()
        everything = job_stats(store)
        assert everything.num_rows == 720
        keys = list(
            zip(
                everything["server"].to_pylist(),
                everything["target"].to_pylist(),
                everything["job_id_raw"].to_pylist(),
                everything["operation"].to_pylist(),
                everything["ts"].to_pylist(),
                strict=True,
            )
        )
        assert keys == sorted(keys, key=lambda k: (k[0], k[1] or "", k[2], k[3], k[4]))
        assert everything["server"].to_pylist()[0] == "mds1"

        job_10 = job_stats(store, job_ids=["10"])
        assert set(job_10["job_id_raw"].to_pylist()) == {
            "SLURM_JOB10:0:es18kxe-co-client",
            "SLURM_JOB10",
        }
        assert job_10.num_rows == 2 * 2 * 15
        on_host = job_stats(store, hosts=["es18kxe-co-client"], job_ids=["10", "20"])
        assert set(on_host["job_id"].to_pylist()) == {"10", "20"}
        assert set(on_host["host"].to_pylist()) == {"es18kxe-co-client"}
        assert on_host.num_rows == 2 * 2 * 15
        data = job_stats(store, job_ids=["10"], operations=["read_bytes", "write_bytes"])
        assert set(data["operation"].to_pylist()) <= {"read_bytes", "write_bytes"}
        assert data.num_rows == sum(
            op in {"read_bytes", "write_bytes"} for op in job_10["operation"].to_pylist()
        )
        assert data.num_rows > 0
        assert job_stats(store, operations=[]).num_rows == 0
        assert job_stats(store, hosts=[]).num_rows == 0

        mdt_first = datetime(2017, 11, 15, 21, 37, 17)
        assert job_stats(store, until=mdt_first).num_rows == 2 * 16  # jobs 43 and 44
        recent = job_stats(store, since=datetime(2024, 8, 8, 10, 57, 27, 887515))
        assert recent.num_rows > 0
        assert min(recent["ts"].to_pylist()) == datetime(2024, 8, 8, 10, 57, 27, 887515)
        window = job_stats(
            store,
            since=datetime(2024, 8, 8, 10, 57, 27, 887515),
            until=datetime(2024, 8, 8, 10, 57, 27, 887515),
        )
        assert set(window["job_id_raw"].to_pylist()) == {"SLURM_JOB10:0:es18kxe-co-client"}
        assert window.num_rows == 2 * 15  # oss1 and oss2
