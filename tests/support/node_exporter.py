"""A real node_exporter (Debian ``prometheus-node-exporter``) over a fake sysfs, for tests.

node_exporter reads ``<--path.sysfs>/class/infiniband`` on every scrape, so a test can point it
at a real captured tree (and change counters between scrapes). Only the ``infiniband`` collector
runs. A missing binary raises :class:`NodeExporterUnavailable`: the test fails, never skips.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2

from tests.support.servers import free_port

BINARIES = ("prometheus-node-exporter", "node_exporter")


class NodeExporterUnavailable(RuntimeError):
    """node_exporter is not installed or did not start."""


def extract_ttar(archive: Path, destination: Path) -> None:
    """Unpack a ``ttar`` text archive (prometheus' fixture format: ``Directory:``/``Path:``
    records, ``Lines: n`` of content, ``Mode:``; ``# ttar - - -`` separators)."""
    lines = archive.read_text().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Directory: "):
            (destination / line.removeprefix("Directory: ")).mkdir(parents=True, exist_ok=True)
        elif line.startswith("Path: "):
            path = destination / line.removeprefix("Path: ")
            header = lines[i + 1]
            if header.startswith("SymlinkTo: "):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.symlink_to(header.removeprefix("SymlinkTo: "))
                i += 2
                continue
            count = int(header.removeprefix("Lines: "))
            body = lines[i + 2 : i + 2 + count]
            path.parent.mkdir(parents=True, exist_ok=True)
            text = "\n".join(body)
            if text.endswith("EOF") and count:  # ttar marks a file without final newline
                text = text[: -len("EOF")]
            else:
                text += "\n"
            path.write_text(text)
            i += 2 + count
            continue
        i += 1


@contextlib.contextmanager
def node_exporter(
    sysfs: Path, *, collectors: tuple[str, ...] = ("infiniband",), extra_args: tuple[str, ...] = ()
) -> Iterator[str]:
    """Run node_exporter on a free loopback port over ``sysfs``; yield its /metrics URL
    (``extra_args``: more flags, e.g. ``--collector.textfile.directory=DIR``)."""
    binary = next((shutil.which(b) for b in BINARIES if shutil.which(b)), None)
    if binary is None:
        raise NodeExporterUnavailable(
            "prometheus-node-exporter not installed: run scripts/install-system-deps.sh"
        )
    port = free_port()
    args = [
        binary,
        f"--web.listen-address=127.0.0.1:{port}",
        f"--path.sysfs={sysfs}",
        "--collector.disable-defaults",
        *(f"--collector.{name}" for name in collectors),
        *extra_args,
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                raise NodeExporterUnavailable(f"node_exporter exited: {output[-2000:]}")
            try:
                if httpx2.get(url, timeout=1).status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise NodeExporterUnavailable("node_exporter did not answer in 15 s")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        if proc.stdout:
            proc.stdout.close()
