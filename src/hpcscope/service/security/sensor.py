"""``hpcscope sensor``: Debian's bpftrace with hpcscope's program, written as a Tetragon export.

:func:`render_program` fills the shipped template (``deploy/bpftrace/hpcscope-sensor.bt``) with
the protected prefixes (the topology's checkpoint, weight and dataset roots, plus
``/dev/infiniband/uverbs``) and the temp directories whose execs are reported;
:class:`Sensor` runs ``bpftrace -f json -B line`` on it as root, turns each output line into
records (:mod:`hpcscope.ingest.security.bpftrace`), puts them back in kernel order (the
per-CPU rings arrive interleaved: :mod:`hpcscope.service.security.sensor_order`, a 0.5 s
hold) and turns them into Tetragon export events
(:mod:`hpcscope.service.security.sensor_events`), one JSON line each, flushed as they are
released so a tail sees an event within a second. The file it writes is read like Tetragon's
(``tetragon.events_path``).

Requirements: root (or CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN), tracefs (mounted at
``/sys/kernel/tracing`` when missing), bpftrace >= 0.17 (Debian 12). Tracepoints only.
"""

from __future__ import annotations

import logging
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import orjson

from hpcscope.ingest.security.bpftrace import SensorRecord, parse_sensor_line
from hpcscope.ingest.security.lines import SecurityEventError
from hpcscope.model.errors import ConfigError, HpcscopeError
from hpcscope.service.security.sensor_events import (
    KERNEL_STRLEN,
    SensorStats,
    SensorTranslator,
)
from hpcscope.service.security.sensor_order import DEFAULT_HOLD_NS, KernelOrder
from hpcscope.service.security.sensor_procs import ProcReader
from hpcscope.service.security.sensor_watch import SensorWatch
from hpcscope.service.settings import REPO_ROOT

log = logging.getLogger(__name__)

PROGRAM_NAME = "hpcscope-sensor.bt"
#: bpftrace's string size: the BPF stack (512 bytes) of the open and exec probes holds one
#: path of this size; longer paths are cut in the kernel and read back whole from /proc.
STRLEN = KERNEL_STRLEN
UVERBS_PREFIX = "/dev/infiniband/uverbs"
TRACEFS = Path("/sys/kernel/tracing")


class SensorConfigError(ConfigError):
    """A protected prefix or temp directory the program cannot watch (quote, relative, long)."""


class SensorUnavailable(HpcscopeError, RuntimeError):
    """bpftrace is missing, not root, no tracefs, or the program did not attach."""


def bundled_program_path() -> Path:
    """The shipped template (``deploy/bpftrace`` of the checkout or the wheel)."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "bpftrace" / PROGRAM_NAME,
        REPO_ROOT / "deploy" / "bpftrace" / PROGRAM_NAME,
    ):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no bundled {PROGRAM_NAME}")


def _checked(prefixes: Sequence[str], what: str, *, allow_empty: bool = False) -> list[str]:
    """The prefixes, validated, without those a shorter one already covers (each prefix is
    its own probe: an overlap would report an open twice)."""
    for prefix in prefixes:
        if not prefix.startswith("/"):
            raise SensorConfigError(f"{what} {prefix!r} is not absolute", source="sensor")
        if any(c in prefix for c in '"\\@') or not prefix.isprintable():
            raise SensorConfigError(f"{what} {prefix!r}: quotes, backslashes, @ and control "
                                    "characters cannot be matched", source="sensor")  # fmt: skip
        if len(prefix.encode()) >= STRLEN:
            raise SensorConfigError(
                f"{what} {prefix!r} is longer than the program's {STRLEN - 1} bytes",
                source="sensor",
            )
    kept: list[str] = []
    for prefix in sorted(set(prefixes), key=lambda p: (len(p), p)):
        if not any(prefix.startswith(shorter) for shorter in kept):
            kept.append(prefix)
    if not kept and not allow_empty:
        raise SensorConfigError(f"no {what}", source="sensor")
    return sorted(kept)


def _repeat(template: str, name: str, prefixes: Sequence[str]) -> str:
    begin, end = f"// @FOR_EACH {name}\n", f"// @END {name}\n"
    if begin not in template or end not in template:
        raise SensorConfigError(f"the program has no {name} block", source="sensor")
    head, _, rest = template.partition(begin)
    block, _, tail = rest.partition(end)
    copies = [
        block.replace("@PREFIX@", prefix).replace("@LENGTH@", str(len(prefix.encode())))
        for prefix in prefixes
    ]
    return head + "".join(copies) + tail


def _optional(template: str, has_syscall: Callable[[str], bool]) -> str:
    """Each ``// @OPTIONAL <syscall>...`` ... ``// @END optional`` block, kept when the kernel
    has every syscall it names (a kernel without modules has no finit_module tracepoint, and
    bpftrace 0.17 refuses a program with a probe it cannot attach)."""
    out: list[str] = []
    rest = template
    while "// @OPTIONAL " in rest:
        head, _, after = rest.partition("// @OPTIONAL ")
        names, _, after = after.partition("\n")
        block, _, rest = after.partition("// @END optional\n")
        out.append(head)
        if all(has_syscall(name) for name in names.split()):
            out.append(block)
    return "".join(out) + rest


def syscall_tracepoints(tracefs: Path = TRACEFS) -> Callable[[str], bool]:
    """Whether the kernel has a syscall's tracepoints (all of them when tracefs cannot be
    read: ``--print-program`` on a machine without it)."""
    events = tracefs / "events" / "syscalls"
    if not events.is_dir():
        return lambda name: True
    return lambda name: (events / f"sys_enter_{name}").is_dir()


def render_program(
    template: str,
    *,
    protected: Sequence[str] = (),
    watch: SensorWatch | None = None,
    watch_uverbs: bool = True,
    has_syscall: Callable[[str], bool] | None = None,
) -> str:
    """The program with one copy of each prefix block per prefix.

    Args:
        template: the text of ``hpcscope-sensor.bt``.
        protected: path prefixes whose opens, reads, writes and mmaps are reported (a root
            should end in ``/`` so ``/ckpt/`` does not match ``/ckpt-old``); with ``watch``,
            its own protected roots are added.
        watch: the policies' selectors (:class:`SensorWatch`): the secrets (any access), the
            sensitive write prefixes and the unlinked roots; default: the policies' lists.
        watch_uverbs: also report opens of ``/dev/infiniband/uverbs*`` (RD-4).
        has_syscall: whether the kernel has a syscall's tracepoints (optional blocks);
            default: this machine's (:func:`syscall_tracepoints`).

    Raises:
        SensorConfigError: a prefix the program cannot match.
    """
    watch = watch or SensorWatch(protected=tuple(protected))
    roots = _checked(
        [*protected, *watch.kernel_any_access(), *((UVERBS_PREFIX,) if watch_uverbs else ())],
        "protected prefix",
    )
    written = _checked(watch.kernel_written(), "written prefix")
    unlinked = _checked([*protected, *watch.kernel_unlinked()], "unlinked root", allow_empty=True)
    program = _repeat(_repeat(template, "protected", roots), "written", written)
    return _optional(_repeat(program, "unlinked", unlinked), has_syscall or syscall_tracepoints())


def monotonic_to_wall_ns() -> int:
    """Epoch ns minus CLOCK_MONOTONIC ns now (bpftrace's ``nsecs`` is CLOCK_MONOTONIC)."""
    return time.time_ns() - time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def check_environment(bpftrace: str) -> str:
    """The bpftrace executable, after checking root and tracefs (mounting it if needed).

    Raises:
        SensorUnavailable: what is missing, in words an operator can act on.
    """
    found = shutil.which(bpftrace)
    if found is None:
        raise SensorUnavailable(f"{bpftrace} not found: apt-get install bpftrace (Debian 12)")
    if os.geteuid() != 0:
        raise SensorUnavailable("the sensor loads BPF programs: run it as root")
    if not (TRACEFS / "events" / "syscalls").is_dir():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False,
                       capture_output=True)  # fmt: skip
        if not (TRACEFS / "events" / "syscalls").is_dir():
            raise SensorUnavailable(
                f"no syscall tracepoints under {TRACEFS} (mount -t tracefs nodev {TRACEFS}; "
                "a kernel with CONFIG_FTRACE_SYSCALLS)"
            )
    return found


@dataclass
class Sensor:
    """The sensor of one node.

    Args:
        program: the rendered program (:func:`render_program`).
        output: where Tetragon JSON lines go (a text file or stdout).
        node: ``node_name`` of the events.
        bpftrace: the executable.
        proc_root: where processes are read (``/proc``).
        on_error: called with each output line that could not be read.
        watch: what is posted (the policies' selectors; :class:`SensorWatch`).
        reorder_hold_ns: how long a record waits for earlier ones from other CPUs' rings
            (:class:`~hpcscope.service.security.sensor_order.KernelOrder`).
    """

    program: str
    output: IO[str]
    node: str
    bpftrace: str = "bpftrace"
    proc_root: Path = Path("/proc")
    on_error: Callable[[SecurityEventError], None] | None = None
    watch: SensorWatch | None = None
    reorder_hold_ns: int = DEFAULT_HOLD_NS

    def __post_init__(self) -> None:
        self.translator = SensorTranslator(
            ProcReader(node=self.node, proc_root=self.proc_root),
            node=self.node,
            monotonic_to_wall_ns=monotonic_to_wall_ns(),
            watch=self.watch,
        )
        self.attached = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: list[str] = []

    @property
    def stats(self) -> SensorStats:
        return self.translator.stats

    def run(self, *, duration_seconds: float | None = None, program_dir: Path | None = None) -> int:
        """Run until bpftrace exits, :meth:`stop` is called, or ``duration_seconds`` pass.

        Returns bpftrace's exit status (0 after a stop or the duration).

        Raises:
            SensorUnavailable: missing bpftrace, not root, no tracefs, or bpftrace failed
                before attaching (its error lines in the message).
        """
        executable = check_environment(self.bpftrace)
        directory = program_dir or Path(os.environ.get("TMPDIR", "/tmp"))
        path = directory / f"hpcscope-sensor-{os.getpid()}.bt"
        path.write_text(self.program, encoding="utf-8")
        # 4 MiB of perf ring per CPU (bpftrace's default is 256 KiB): a busy node's connects
        # and exits must not push out the events of a checkpoint read
        env = {**os.environ, "BPFTRACE_STRLEN": str(STRLEN), "BPFTRACE_PERF_RB_PAGES": "1024"}
        try:
            self._process = subprocess.Popen(
                [executable, "-f", "json", "-B", "line", str(path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
            stderr = threading.Thread(target=self._drain_stderr, daemon=True)
            stderr.start()
            timer = None
            if duration_seconds is not None:
                timer = threading.Timer(duration_seconds, self.stop)
                timer.daemon = True
                timer.start()
            self._pump()
            code = self._process.wait()
            stderr.join(timeout=5)
            if timer is not None:
                timer.cancel()
        finally:
            path.unlink(missing_ok=True)
            if self._process is not None:
                for pipe in (self._process.stdout, self._process.stderr):
                    if pipe is not None:
                        pipe.close()
        if not self.attached.is_set():
            errors = [line for line in self._stderr if "RLIMIT_MEMLOCK" not in line]
            raise SensorUnavailable(
                f"bpftrace exited {code} before attaching: " + " | ".join(errors[-8:])
            )
        return 0 if self._stopped else code

    _stopped = False

    def stop(self) -> None:
        """Stop bpftrace (SIGINT: it detaches its probes and prints its last maps)."""
        self._stopped = True
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(2)

    def _drain_stderr(self) -> None:
        assert self._process is not None and self._process.stderr is not None
        for raw in self._process.stderr:
            line = raw.decode("utf-8", errors="replace").rstrip()
            if line:
                self._stderr.append(line)
                del self._stderr[:-50]
                log.debug("bpftrace: %s", line)

    def _pump(self) -> None:
        """Read bpftrace's lines, put their records back in kernel order
        (:class:`~hpcscope.service.security.sensor_order.KernelOrder`), translate and write
        them; wakes every 0.1 s so held records go out while bpftrace is quiet."""
        assert self._process is not None and self._process.stdout is not None
        descriptor = self._process.stdout.fileno()  # read raw: select sees no buffered bytes
        order = KernelOrder(self.reorder_hold_ns)
        number, partial = 0, b""
        with selectors.DefaultSelector() as selector:
            selector.register(descriptor, selectors.EVENT_READ)
            while True:
                chunk = b""
                if selector.select(timeout=0.1):
                    chunk = os.read(descriptor, 1 << 16)
                    if not chunk:
                        break
                *lines, partial = (partial + chunk).split(b"\n")
                for raw in lines:
                    number += 1
                    self._queue(order, raw, number)
                self._write(order.pop_ready(time.monotonic_ns()))
        if partial.strip():
            self._queue(order, partial, number + 1)
        self._write(order.drain())

    def _queue(self, order: KernelOrder, raw: bytes, number: int) -> None:
        if not raw.strip():
            return
        try:
            records = parse_sensor_line(raw, source="bpftrace", line_number=number)
        except SecurityEventError as exc:
            if self.on_error is not None:
                self.on_error(exc)
            return
        for record in records:
            self.translator.observe(record)
        order.push(records, arrival_ns=time.monotonic_ns())

    def _write(self, records: list[SensorRecord]) -> None:
        if not records:
            return
        events = self.translator.feed_all(records)
        for event in events:
            self.output.write(orjson.dumps(event).decode() + "\n")
        if events:
            self.output.flush()
        if not self.attached.is_set() and self.stats.attached_probes:
            log.info("sensor attached %d probes", self.stats.attached_probes)
            self.attached.set()
