"""Run the fuzzer on one target, or a bounded pass over all of them.

    .venv/bin/python -m fuzz.run exposition -max_total_time=600     # one target, libFuzzer flags
    .venv/bin/python -m fuzz.run --all --seconds 20                 # every target, CI's pass

One target: atheris (libFuzzer for Python) instruments hpcscope's modules for coverage,
starts from the committed corpus ``fuzz/corpus/<target>/`` (new inputs go to a scratch
directory unless ``--keep``), and feeds each input to the target's parser. A crash is any
exception other than the target's typed errors, a typed error naming another source, or an
input that runs past ``-timeout`` seconds (a hang); libFuzzer writes the input to
``crash-*``/``timeout-*`` files in ``--artifacts`` and exits non-zero.

``--all`` runs every target (or each ``--only NAME``) in its own process for ``--seconds`` each
and prints one JSON line last: ``{"targets": n, "crashes": c, "executions": e, "seconds": s}``;
exit 1 on any crash. Each process's scratch corpus lives in a temporary directory removed
after it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from fuzz.targets import SOURCE, TARGETS, Target

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fuzz" / "corpus"
#: Per-input bound: a parser that takes longer on one input hangs (generous: the CI machine is
#: shared; the slowest seed takes well under 0.1 s).
TIMEOUT_SECONDS = 10
MAX_INPUT_BYTES = 64 * 1024
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")


def fuzz_one(target: Target, libfuzzer_args: list[str], *, keep: bool, artifacts: Path) -> None:
    """Fuzz ``target`` in this process (never returns: libFuzzer exits); crash files go to
    ``artifacts`` (libFuzzer's default, the working directory, put them in the checkout)."""
    import atheris

    with atheris.instrument_imports(include=["hpcscope"]):
        allowed = target.allowed_errors()
        try:  # the targets import their parsers lazily: import them here, instrumented
            target.call(b"")
        except allowed:
            pass

    def test_one_input(data: bytes) -> None:
        try:
            target.feed(data)
        except allowed as exc:
            source = getattr(exc, "source", SOURCE)
            if SOURCE not in str(source):  # a file written for the target keeps the name
                raise AssertionError(f"a typed error naming {source!r}, not the input") from exc

    corpus = CORPUS / target.name
    scratch = corpus if keep else Path(tempfile.mkdtemp(prefix=f"fuzz-{target.name}-"))
    dirs = [str(scratch)] if keep else [str(scratch), str(corpus)]
    if any(Path(arg).is_file() for arg in libfuzzer_args):  # reproduce: run just those inputs
        dirs = []
    argv = [
        sys.argv[0],
        *dirs,
        f"-timeout={TIMEOUT_SECONDS}",
        f"-max_len={MAX_INPUT_BYTES}",
        "-rss_limit_mb=3072",
        f"-artifact_prefix={artifacts}/{target.name}-",
        *libfuzzer_args,
    ]
    artifacts.mkdir(parents=True, exist_ok=True)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


def fuzz_all(
    seconds: int,
    artifacts: Path,
    *,
    runs: int | None = None,
    seed: int | None = None,
    only: Sequence[str] = (),
) -> int:
    """Every target (or those named in ``only``) for ``seconds`` each (or ``runs`` inputs, with
    a fixed ``seed``: the same inputs every time, what CI runs), one process per target;
    returns the crash count."""
    artifacts.mkdir(parents=True, exist_ok=True)
    crashes, executions = 0, 0
    started = time.monotonic()
    names = [name for name in TARGETS if not only or name in only]
    for name in names:
        cmd = [
            sys.executable,
            "-m",
            "fuzz.run",
            name,
            f"-max_total_time={seconds}",
            *([f"-runs={runs}"] if runs is not None else []),
            *([f"-seed={seed}"] if seed is not None else []),
            f"-artifact_prefix={artifacts}/{name}-",
            "-print_final_stats=1",
        ]
        with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as scratch:
            result = subprocess.run(
                cmd,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=seconds + 120,
                env={
                    **os.environ,
                    "PYTHONPATH": str(ROOT / "src") + os.pathsep + str(ROOT),
                    "TMPDIR": scratch,  # fuzz_one's scratch corpus, removed with it
                },
            )
        done = _DONE.search(result.stderr)
        ran = int(done[1]) if done else 0
        executions += ran
        status = "ok" if result.returncode == 0 else f"CRASH (exit {result.returncode})"
        print(f"{name:18s} {ran:8d} runs  {status}", flush=True)
        if result.returncode != 0:
            crashes += 1
            print(result.stderr[-4000:], file=sys.stderr)
    print(
        json.dumps(
            {
                "targets": len(names),
                "crashes": crashes,
                "executions": executions,
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )
    return crashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", choices=sorted(TARGETS))
    parser.add_argument("--all", action="store_true", help="a bounded pass over every target")
    parser.add_argument("--seconds", type=int, default=20, help="per target, with --all")
    parser.add_argument("--runs", type=int, help="per target, with --all: stop after N inputs")
    parser.add_argument("--seed", type=int, help="with --all: libFuzzer's seed (reproducible)")
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted(TARGETS),
        default=[],
        help="with --all: this target only (repeatable)",
    )
    parser.add_argument("--keep", action="store_true", help="add new inputs to the corpus")
    parser.add_argument(
        "--artifacts", type=Path, default=ROOT / "test-artifacts" / "fuzz", help="crash files"
    )
    args, libfuzzer_args = parser.parse_known_args()
    if args.all:
        crashes = fuzz_all(
            args.seconds, args.artifacts, runs=args.runs, seed=args.seed, only=args.only
        )
        sys.exit(1 if crashes else 0)
    if args.target is None:
        parser.error("a target, or --all")
    if shutil.which("true") is None:  # pragma: no cover - a sanity check of the environment
        raise SystemExit("no POSIX userland")
    fuzz_one(TARGETS[args.target], libfuzzer_args, keep=args.keep, artifacts=args.artifacts)


if __name__ == "__main__":
    main()
