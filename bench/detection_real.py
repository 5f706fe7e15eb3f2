"""Detection on real Falco and Tetragon lines: quality per tool and vector, and the delay from
a line written to its alert on ``/api/alerts`` at 1,000 events/s.

**Quality.** Every line of ``tests/fixtures/security/real/`` (real lines from public sources,
each labelled by hand in ``labels.yaml``; provenance in its README) through the parsers and
the event rules a site runs (the bundled rules and Falco meaning table, the default
topology): one engine per source file, each line its own batch
(``tests/support/real_corpus.py``). Recall: attack lines that raised their labelled vector at
their minimum severity or above, over attack lines; benign-HIGH ratio: harmless lines that
raised HIGH or CRITICAL, over harmless lines.

**Delay.** ``hpcscope serve`` started as a subprocess (a fresh store, no scrape target) tailing
a Falco file and a Tetragon file; the corpus's lines, both tools interleaved, appended to them
at ``--rate`` lines a second for ``--seconds``, flushed every 10 ms; ``/api/alerts`` polled
every 250 ms as the demo admin (a session cookie). Every firing adds one to an alert's
``count``, so the sum of counts the server shows tells which lines it has judged: line i is
on ``/api/alerts`` at the first poll whose sum reaches the firings of lines 1..i (counted by
the same engine in-process over the same sequence). Its delay is that poll's answer time
minus the time line i was flushed; the percentiles are over the lines that raise an alert.

    PYTHONPATH=src:. python bench/detection_real.py [--rate 1000] [--seconds 30]

Prints the quality per tool and vector, the delay, then one JSON line last::

    {"falco_recall": ..., "tetragon_recall": ..., "falco_benign_high_ratio": ...,
     "tetragon_benign_high_ratio": ..., "delay_p99_seconds": ..., ...}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))  # tests.support: the corpus scoring

from tests.support.real_corpus import REAL, TOOLS, Scored, engine, score  # noqa: E402
from tests.support.servers import free_port  # noqa: E402

from hpcscope.ingest.security.falco import parse_falco_lines  # noqa: E402
from hpcscope.ingest.security.tetragon import parse_tetragon_lines  # noqa: E402
from hpcscope.model.security_events import (  # noqa: E402
    FALCO_ALERT_SCHEMA,
    TETRAGON_EVENT_SCHEMA,
)
from hpcscope.service.identity.users import DEMO_LOGINS  # noqa: E402


def quality(scored: list[Scored]) -> dict[str, float | None]:
    """Print recall and benign-HIGH per tool and vector; return the per-tool figures."""
    figures: dict[str, float | None] = {}
    for tool in TOOLS:
        mine = [s for s in scored if s.label.tool == tool]
        attacks = [s for s in mine if s.label.attack]
        harmless = [s for s in mine if not s.label.attack]
        by_vector: dict[str, list[Scored]] = defaultdict(list)
        for s in attacks:
            by_vector[str(s.label.vector)].append(s)
        for vector, lines in sorted(by_vector.items()):
            found = sum(s.found for s in lines)
            print(f"{tool:9s} {vector:22s} attack lines {len(lines):3d}  found {found:3d}  "
                  f"recall {found / len(lines):.3f}")  # fmt: skip
        recall = sum(s.found for s in attacks) / len(attacks)
        high = sum(s.high for s in harmless)
        print(f"{tool:9s} {'all vectors':22s} attack lines {len(attacks):3d}  recall "
              f"{recall:.3f}; harmless lines {len(harmless)}, raised HIGH {high} "
              f"({high / len(harmless):.3f})")  # fmt: skip
        for s in attacks:
            if not s.found:
                print(f"  missed {tool}/{s.label.file}:{s.label.line}: {s.label.why}")
        figures[f"{tool}_recall"] = round(recall, 4)
        figures[f"{tool}_benign_high_ratio"] = round(high / len(harmless), 4)
        figures[f"{tool}_attack_lines"] = len(attacks)
        figures[f"{tool}_harmless_lines"] = len(harmless)
    return figures


def _lines() -> list[tuple[str, bytes]]:
    """The corpus's lines, the two tools interleaved (a node runs both)."""
    by_tool = {
        tool: [
            (tool, line)
            for path in sorted((REAL / tool).glob("*.jsonl"))
            for line in path.read_bytes().splitlines()
        ]
        for tool in TOOLS
    }
    mixed: list[tuple[str, bytes]] = []
    for index in range(max(len(v) for v in by_tool.values())):
        mixed += [by_tool[tool][index] for tool in TOOLS if index < len(by_tool[tool])]
    return mixed


def expected_firings(sequence: list[tuple[str, bytes]]) -> list[int]:
    """How many alert firings each line of ``sequence`` adds, in order (the server's engine
    in-process: firings add to ``count`` whatever the batching)."""
    rules = engine()
    firings: list[int] = []
    for tool, line in sequence:
        if tool == "falco":
            falco = parse_falco_lines([line], source="falco").table
            tetragon = TETRAGON_EVENT_SCHEMA.empty_table()
        else:
            falco = FALCO_ALERT_SCHEMA.empty_table()
            tetragon = parse_tetragon_lines([line], source="tetragon").table
        verdict = rules.evaluate(falco, tetragon, owners={})
        firings.append(sum(a.count for a in verdict.alerts))
    return firings


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def delay(rate: int, seconds: float) -> dict[str, float | None]:
    """Run the server, write the lines at ``rate`` a second, measure each line's delay."""
    corpus = _lines()
    sequence = [corpus[i % len(corpus)] for i in range(int(rate * seconds))]
    firings = expected_firings(sequence)
    cumulative, total = [], 0
    for count in firings:
        total += count
        cumulative.append(total)
    admin = next(login for login in DEMO_LOGINS if login.name == "admin")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        paths = {"falco": work / "falco.json", "tetragon": work / "tetragon.log"}
        for path in paths.values():
            path.touch()
        port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT / "src"),
            "HPCSCOPE_FALCO_EVENTS_PATH": str(paths["falco"]),
            "HPCSCOPE_TETRAGON_EVENTS_PATH": str(paths["tetragon"]),
        }
        server = subprocess.Popen(
            [sys.executable, "-c", "import sys; from hpcscope.cli.main import main; "
             "sys.argv[0] = 'hpcscope'; main()", "serve", "--store",
             str(work / "store.duckdb"), "--port", str(port), "--log-level", "warning"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        try:
            client = httpx.Client(base_url=base, timeout=10)
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/login").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("hpcscope serve did not start")
                time.sleep(0.2)
            login = client.post(
                "/login",
                data={"username": admin.name, "password": admin.password, "next": "/"},
                headers={"Origin": base},
            )
            assert login.status_code in (200, 303), login.text
            handles = {tool: path.open("ab") for tool, path in paths.items()}
            written: list[float] = [0.0] * len(sequence)
            seen: list[float | None] = [None] * len(sequence)
            next_unseen = 0
            start = time.monotonic()
            step, index, last_poll = 0.01, 0, 0.0
            while next_unseen < len(sequence):
                now = time.monotonic() - start
                due = min(len(sequence), int(now * rate))
                if index < due:
                    for i in range(index, due):
                        tool, line = sequence[i]
                        handles[tool].write(line + b"\n")
                    for handle in handles.values():
                        handle.flush()
                    flushed = time.monotonic() - start
                    for i in range(index, due):
                        written[i] = flushed
                    index = due
                if now - last_poll >= 0.25:
                    last_poll = now
                    answer = client.get("/api/alerts")
                    answered = time.monotonic() - start
                    shown = sum(a["count"] for a in answer.json()["alerts"])
                    while next_unseen < index and cumulative[next_unseen] <= shown:
                        seen[next_unseen] = answered
                        next_unseen += 1
                if now > seconds + 60:
                    break
                time.sleep(step)
            for handle in handles.values():
                handle.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
    delays = [s - written[i] for i, s in enumerate(seen) if s is not None and firings[i] > 0]
    raising = sum(1 for f in firings if f > 0)
    missing = sum(1 for i, s in enumerate(seen) if s is None and firings[i] > 0)
    print(f"delay: {len(sequence)} lines at {rate}/s for {seconds:.0f} s, {raising} raising "
          f"an alert ({cumulative[-1]} firings); on /api/alerts: p50 "
          f"{_percentile(delays, 0.5):.2f} s, p99 {_percentile(delays, 0.99):.2f} s, max "
          f"{max(delays):.2f} s; never shown {missing}")  # fmt: skip
    return {
        "delay_p50_seconds": round(_percentile(delays, 0.5), 3),
        "delay_p99_seconds": round(_percentile(delays, 0.99), 3) if not missing else None,
        "delay_max_seconds": round(max(delays), 3),
        "delay_lines": len(sequence),
        "delay_raising_lines": raising,
        "delay_never_shown": missing,
        "rate_lines_per_second": rate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=1000, help="lines written a second")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to write")
    args = parser.parse_args()
    figures = quality(score())
    figures |= delay(args.rate, args.seconds)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
