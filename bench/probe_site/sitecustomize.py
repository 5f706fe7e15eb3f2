"""Started by Python in the demo of ``bench/soak.py --probe``: :func:`bench.memprobe.start`
when ``HPCSCOPE_BENCH_PROBE`` is set (only this folder on the path makes it run at all)."""

import os

if os.environ.get("HPCSCOPE_BENCH_PROBE"):
    from bench.memprobe import start

    start()
