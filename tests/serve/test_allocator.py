"""The serving process's glibc allocator gives large freed blocks back (serve/allocator.py).

Each case runs in a fresh interpreter: ``mallopt`` changes the whole process, and glibc's
threshold is raised for good by the first large block freed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hpcscope.serve.allocator import ARENA_MAX, MMAP_THRESHOLD_BYTES

SRC = Path(__file__).resolve().parents[2] / "src"

# After a 4 MiB block is freed, glibc (untuned) serves blocks up to 4 MiB from its heap; with
# the fixed threshold, each 256 KiB block held stays its own mmap (mallinfo2's hblks).
PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from hpcscope.serve.allocator import tune_allocator

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    applied = tune_allocator() if sys.argv[1] == "tuned" else {}
    big = bytearray(4 << 20)
    del big
    before = libc.mallinfo2().hblks
    held = [bytearray(256 << 10) for _ in range(40)]
    after = libc.mallinfo2().hblks
    print(json.dumps({"applied": applied, "mmapped_blocks": after - before}))
    """
)


def _probe(mode: str, **env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.update(env, PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_large_blocks_stay_mmapped_after_a_larger_one_was_freed() -> None:
    untuned = _probe("untuned")
    tuned = _probe("tuned")
    assert untuned["mmapped_blocks"] == 0  # glibc raised its threshold to 4 MiB: all in heap
    assert tuned["mmapped_blocks"] == 40  # each given back to the system when freed
    assert tuned["applied"] == {
        "MALLOC_ARENA_MAX": ARENA_MAX,
        "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD_BYTES,
    }


def test_the_sites_environment_variables_win() -> None:
    result = _probe("tuned", MALLOC_ARENA_MAX="4", MALLOC_MMAP_THRESHOLD_="8388608")
    assert result["applied"] == {}
    assert result["mmapped_blocks"] == 0  # the site's 8 MiB threshold kept


def test_one_variable_set_leaves_the_other_to_the_module() -> None:
    result = _probe("tuned", MALLOC_ARENA_MAX="8")
    assert result["applied"] == {"MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD_BYTES}
    assert result["mmapped_blocks"] == 40


TRIM = textwrap.dedent(
    """
    import json
    from hpcscope.serve.allocator import trim_allocator, tune_allocator

    def anon_mib():
        with open("/proc/self/status") as status:
            line = next(x for x in status if x.startswith("RssAnon:"))
        return int(line.split()[1]) / 1024

    tune_allocator()
    held = [bytearray(4000) for _ in range(16_000)]  # 64 MB in the heap, under the threshold
    pinned = bytearray(4000)  # the top of the heap stays in use: nothing freed below it goes
    del held
    before = anon_mib()
    trimmed = trim_allocator()
    print(json.dumps({"trimmed": trimmed, "given_back_mib": before - anon_mib()}))
    """
)


def test_trimming_gives_the_arenas_free_pages_back() -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run(
        [sys.executable, "-c", TRIM],
        env={**environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    assert result["trimmed"] is True
    assert result["given_back_mib"] > 32  # of the 64 MB freed below the top
