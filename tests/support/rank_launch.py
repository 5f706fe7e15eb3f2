"""Launch real gloo ranks for a test: one spec file, one fresh interpreter, its output on failure.

Used by :mod:`tests.support.torch_ranks` (traced training steps) and
:mod:`tests.support.integrity_ranks` (the gradient-integrity hook): each writes a spec, and its
``__main__`` spawns the ranks with :func:`torch.multiprocessing.spawn`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on loopback now (the ranks' rendezvous)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_ranks(
    module: str,
    scenarios: list[dict[str, Any]],
    out_dir: Path,
    *,
    world_size: int,
    timeout_seconds: float,
) -> None:
    """Run ``python -m module SPEC OUT_DIR`` over ``scenarios`` on ``world_size`` ranks.

    The child imports this checkout (repository root and ``src`` first on ``PYTHONPATH``) with
    one OpenMP thread per rank.

    Raises:
        RuntimeError: the ranks failed (their output is in the message).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = {"world_size": world_size, "port": free_port(), "scenarios": scenarios}
    spec_path = out_dir / "spec.json"
    spec_path.write_text(json.dumps(spec))
    path = os.pathsep.join([str(ROOT), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", module, str(spec_path), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_seconds,
        env=env,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"torch ranks failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
