"""Build the seed corpora under ``fuzz/corpus/<target>/`` from the real samples.

    .venv/bin/python -m fuzz.seed

Each target's seed globs (:data:`fuzz.targets.TARGETS`) are copied, cut to
:data:`MAX_SEED_BYTES` (a fuzzer mutates small inputs faster; the cut is still real text). Some
formats have no small real file in the fixtures; their seeds are derived here from real ones,
deterministically: a Kineto trace of the first events of HTA's sample rank, a tar.gz upload of
it, job records of the prolog's real run on Slurm 22.05, a file_sd list, integrity records.
The corpora are committed; the fuzzer's findings that reach new code can be added with
``python -m fuzz.run TARGET --keep``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

from fuzz.hostile import SHAPES, marked
from fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fuzz" / "corpus"
SEEDS = ROOT / "fuzz" / "seeds"
MAX_SEED_BYTES = 16 * 1024


def _derived() -> dict[str, dict[str, bytes]]:
    sample = ROOT / "tests/fixtures/traces/hta_trace_filter_2rank/sampled_rank-0.json.gz"
    with gzip.open(sample) as stream:
        trace = json.load(stream)
    small = {**trace, "traceEvents": trace["traceEvents"][:40]}
    kineto = json.dumps(small).encode()
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("rank-0.json")
        info.size, info.mtime = len(kineto), 0
        tar.addfile(info, io.BytesIO(kineto))
    records = json.loads(
        (ROOT / "tests/fixtures/slurm/debian-22.05/job_records_after.json").read_text()
    )
    file_sd = [
        {"targets": ["gpu01:9400", "gpu02:9400"], "labels": {"exporter": "dcgm", "rack": "a"}},
        {"targets": ["gpu01:9100"], "labels": {"exporter": "node"}},
    ]
    from tests.support.integrity_records import gradients, step_lines

    grads = gradients(4, seed=1)
    integrity = "\n".join(step_lines(grads, step=3) + step_lines(grads, step=4, sliced=True))
    return {
        "kineto": {"hta-sampled-rank0-40-events.json": kineto},
        "upload": {"kineto-rank0.tar.gz": archive.getvalue()},
        "job_record": {name: text.encode() for name, text in sorted(records.items())[:3]},
        "file_sd": {"two-groups.json": json.dumps(file_sd, indent=1).encode()},
        "integrity": {"four-ranks-two-steps.jsonl": integrity.encode()},
    }


def main() -> None:
    for name, files in _derived().items():
        folder = SEEDS / name
        folder.mkdir(parents=True, exist_ok=True)
        for file_name, data in files.items():
            (folder / file_name).write_bytes(data)
    for target in TARGETS.values():
        folder = CORPUS / target.name
        folder.mkdir(parents=True, exist_ok=True)
        count = 0
        for pattern in target.seeds:
            for path in sorted(ROOT.glob(pattern)):
                if not path.is_file():
                    continue
                data = path.read_bytes()[:MAX_SEED_BYTES]
                digest = hashlib.sha1(data).hexdigest()[:12]  # a file name, not a MAC
                (folder / f"seed-{path.stem[:40]}-{digest}").write_bytes(data)
                count += 1
        if count == 0:
            raise SystemExit(f"{target.name}: no seed matched {target.seeds}")
        for shape in SHAPES:  # the structured hostile shapes, small, in a few envelopes
            for envelope in (0, 1, 2):
                seed = marked(shape, parameter=3, envelope=envelope)
                (folder / f"hostile-{shape}-{envelope}").write_bytes(seed)
                count += 1
        print(f"{target.name}: {count} seeds")


if __name__ == "__main__":
    main()
