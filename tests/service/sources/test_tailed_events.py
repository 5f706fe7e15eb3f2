"""A tailed Falco or Tetragon file as a source of its own: each poll is one ``scrapes`` row, the
same row the alert engine writes for the tails it polls itself."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.sources import FalcoSource
from hpcscope.service.sources._tail import TailedEvents
from hpcscope.twin import attacks
from hpcscope.twin.attacks import SECOND_NS

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def test_each_poll_is_a_scrapes_row_not_ok_while_the_file_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "falco.json"
    buffer = SecurityEventBuffer()
    source = TailedEvents("falco", FalcoSource(path, buffer))
    missing = source.read(NOW)
    assert missing.health.ok == 0 and missing.health.targets == 1
    [batch] = missing.batches
    [row] = batch.rows.to_pylist()
    assert batch.table == "scrapes"
    assert (row["exporter"], row["target"], row["ok"], row["samples"]) == (
        "falco", str(path), False, 0,
    )  # fmt: skip
    assert row["error"] == "file does not exist (yet)"
    line = attacks.falco_miner(1_796_126_400 * SECOND_NS).falco[0]
    path.write_text("not json\n" + line + "\n")
    polled = source.read(NOW)
    [row] = polled.batches[0].rows.to_pylist()
    assert (row["ok"], row["samples"], row["rejected_lines"], row["error"]) == (True, 1, 1, None)
    assert polled.health.ok == 1 and polled.health.rows == 1
    assert buffer.drain().falco.num_rows == 1  # the parsed line waits for the alert engine
