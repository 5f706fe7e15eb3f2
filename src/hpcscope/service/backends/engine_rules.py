"""The recording rules hpcscope reads from a site's engine, and their names: one place for both.

``deploy/prometheus/hpcscope-engine-rules.yml`` is :func:`engine_rules_yaml` for a 15 s scrape
interval and a 1-minute window (a test holds the file equal to it); ``hpcscope deploy
prometheus-rules --scrape-interval S`` writes it for another interval. A site loads it into
Prometheus (``rule_files``) or vmalert (``-rule``); the prometheus backend then reads these
series instead of raw samples (``docs/storage.md``).

Every rule is computed from the raw dcgm-exporter series (never from another recorded series:
vmalert writes its results back asynchronously, so a rule reading another rule of the same
evaluation would see the previous one). One evaluation covers the window ``(t - W, t]``, its
range written ``W - 1 ms`` (``59s999ms``): Prometheus 2's range selectors and subqueries
include both ends, VictoriaMetrics' only the newer one, and a sample on an evaluation instant
would otherwise count in two windows. Consecutive evaluations tile time, so sums over them are
sums over the raw samples.

An evaluation at ``t`` reads the window ending ``D`` before it, ``(t - D - W, t - D]`` (every
range carries ``offset D``; ``D`` = one scrape interval by default, ``--delay``): a rule
evaluated at ``t`` does not wait for a scrape that started before ``t`` and is still being
ingested (a slow exporter), and would miss that sample for good. A scrape ends within its
interval (``scrape_timeout`` is at most ``scrape_interval``); a site whose samples arrive later
(remote write, a federation hop) sets ``D`` to its ingestion delay. ``D`` plays the part of
Prometheus' ``query_offset`` (2.53 and later) and vmalert's ``eval_delay``, written in the rules
so that every engine version reads the same windows; the reader shifts its reads by the same
``D`` (``prometheus_rule_delay_seconds``).

Per job GPU (``hpc_job_node_gpu``, labels ``hpc_job``, ``node``, ``gpu``, ``GPU_I_ID``):

- ``<FIELD>:sum<W>`` and ``<FIELD>:count<W>`` of the fields a report averages (utilisation,
  SM and tensor active, occupancy, DRAM active, power, SM clock): the report's mean of a field
  is ``sum / count`` over its minutes, each sample weighing one scrape interval, as the
  embedded store weighs it;
- ``DCGM_FI_DEV_GPU_UTIL:observed_seconds<W>``: samples x scrape interval (GPU-seconds seen);
- ``DCGM_FI_PROF_SM_ACTIVE:useful_seconds<W>``: sum of SM active x scrape interval (useful
  GPU-seconds: the SMs' time spent computing);
- ``DCGM_FI_DEV_GPU_TEMP:max<W>``, ``DCGM_FI_DEV_FB_USED:max<W>``;
- ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:increase<W>`` (mJ): its rise since the previous
  evaluation's last sample;
- ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS:slowdown_seconds<W>`` and ``:thermal_seconds<W>``:
  seconds with a slowdown reason (NVML 0x4, 0x8, 0x20, 0x40, 0x80) and with a thermal one
  (0x20, 0x40), by a subquery at the scrape interval (PromQL has no bitwise operators: a bit
  is ``floor(x / 2^k) % 2``);
- ``DCGM_FI_DEV_XID_ERRORS:changed_last<W>``: the last Xid when it changed in the window.

Per job (``hpc_job``): observed and useful GPU-seconds, reported utilisation (ratio) and SM
active means, the SM clock mean, the slowdown share: what dashboards and SLOs chart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: What one GPU's series is keyed by (a MIG instance has ``GPU_I_ID``).
GPU_KEY = "hpc_job, node, gpu, GPU_I_ID"
#: GPUs a job holds (``hpc_job`` empty or "0": no job).
WITH_JOB = '{hpc_job!~"|0"}'

#: Fields whose time-weighted mean a report shows, and the GPU summary column it feeds.
MEAN_FIELDS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "reported_util_ratio",
    "DCGM_FI_PROF_SM_ACTIVE": "sm_active_ratio",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active_ratio",
    "DCGM_FI_PROF_SM_OCCUPANCY": "sm_occupancy_ratio",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active_ratio",
    "DCGM_FI_DEV_POWER_USAGE": "power_watts",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_hertz",
}
UTIL = "DCGM_FI_DEV_GPU_UTIL"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
FB_USED = "DCGM_FI_DEV_FB_USED"
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
XID = "DCGM_FI_DEV_XID_ERRORS"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"

#: The rule file shipped in deploy/prometheus.
SHIPPED_SCRAPE_INTERVAL_SECONDS = 15
SHIPPED_WINDOW_SECONDS = 60
#: One scrape interval: a scrape times out within its interval (Prometheus refuses a longer
#: ``scrape_timeout``), so every sample of a window is stored when the window is evaluated.
SHIPPED_DELAY_SECONDS = SHIPPED_SCRAPE_INTERVAL_SECONDS


def delay_seconds_for(scrape_interval_seconds: float, delay_seconds: int | None) -> int:
    """The rules' delay: ``delay_seconds`` when given, else one scrape interval rounded up to
    whole seconds (the module docstring)."""
    return math.ceil(scrape_interval_seconds) if delay_seconds is None else delay_seconds


def duration(seconds: int) -> str:
    """A PromQL duration as rule names carry it: ``60`` -> ``1m``, ``10`` -> ``10s``."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


@dataclass(frozen=True, slots=True)
class RuleNames:
    """The recorded series' names for one window (``window_seconds``, 60 as shipped), and how
    far behind its evaluation instant an evaluation's window ends (``delay_seconds``, 15 as
    shipped; the module docstring)."""

    window_seconds: int = SHIPPED_WINDOW_SECONDS
    delay_seconds: int = SHIPPED_DELAY_SECONDS

    @property
    def offset(self) -> str:
        """The ``offset`` every range of the rules carries (empty without a delay)."""
        return f" offset {duration(self.delay_seconds)}" if self.delay_seconds else ""

    @property
    def window(self) -> str:
        return duration(self.window_seconds)

    @property
    def span(self) -> str:
        """The range one evaluation reads: the window less 1 ms (the module docstring)."""
        seconds = self.window_seconds - 1
        return f"{duration(seconds) if seconds else ''}999ms"

    def gpu(self, field: str, operation: str) -> str:
        """A per-GPU rule: ``hpc_job_node_gpu:<field>:<operation><window>``."""
        return f"hpc_job_node_gpu:{field}:{operation}{self.window}"

    def job(self, field: str, operation: str) -> str:
        """A per-job rule: ``hpc_job:<field>:<operation><window>``."""
        return f"hpc_job:{field}:{operation}{self.window}"

    @property
    def observed(self) -> str:
        return self.gpu(UTIL, "observed_seconds")

    @property
    def useful(self) -> str:
        return self.gpu(SM_ACTIVE, "useful_seconds")

    def probe(self) -> str:
        """The rule whose presence says the engine evaluates these rules."""
        return self.observed


def _slowdown(selector: str) -> str:
    return f"clamp_max(floor({selector} / 4) % 4 + floor({selector} / 32) % 8, 1)"


def _thermal(selector: str) -> str:
    return f"clamp_max(floor({selector} / 32) % 4, 1)"


def _counter_step(field: str, span: str, names: RuleNames) -> str:
    """A counter's rise since the previous evaluation's last sample (its rise inside the
    window for a series' first window): consecutive windows add up to last - first, the rise
    from one scrape to the next included (``increase`` over a window misses the step across
    its start, all of it when the exporter collects once per window). A reset counts 0."""
    selector = f"{field}{WITH_JOB}[{span}]"
    last = f"last_over_time({selector}{names.offset})"
    before = duration(names.window_seconds + names.delay_seconds)
    return (
        f"clamp_min(({last} - last_over_time({selector} offset {before}))"
        f" or ({last} - min_over_time({selector}{names.offset})), 0)"
    )


def _rule(record: str, expr: str) -> str:
    return f"      - record: {record}\n        expr: >-\n          {expr}\n"


def _gpu_rules(names: RuleNames, interval: int) -> list[str]:
    w, o = names.span, names.offset
    per_gpu = f"max by ({GPU_KEY})"

    def over(function: str, field: str) -> str:
        return f"{per_gpu} ({function}({field}{WITH_JOB}[{w}]{o}))"

    rules = []
    for field in MEAN_FIELDS:
        rules.append(_rule(names.gpu(field, "sum"), over("sum_over_time", field)))
        rules.append(_rule(names.gpu(field, "count"), over("count_over_time", field)))
    rules += [
        _rule(names.observed, f"{over('count_over_time', UTIL)} * {interval}"),
        _rule(names.useful, f"{over('sum_over_time', SM_ACTIVE)} * {interval}"),
        _rule(names.gpu(TEMP, "max"), over("max_over_time", TEMP)),
        _rule(names.gpu(FB_USED, "max"), over("max_over_time", FB_USED)),
        _rule(names.gpu(ENERGY, "increase"), f"{per_gpu} ({_counter_step(ENERGY, w, names)})"),
    ]
    throttle = f"{THROTTLE}{WITH_JOB}"
    for operation, indicator in (("slowdown", _slowdown), ("thermal", _thermal)):
        rules.append(
            _rule(
                names.gpu(THROTTLE, f"{operation}_seconds"),
                f"{per_gpu} (sum_over_time(({indicator(throttle)})[{w}:{interval}s]{o}))"
                f" * {interval}",
            )
        )
    # a change seen in the window or across its start (the window plus one interval)
    changes = duration(names.window_seconds + interval)
    rules.append(
        _rule(
            names.gpu(XID, "changed_last"),
            f"{per_gpu} ((last_over_time({XID}{WITH_JOB}[{w}]{o}) != 0)"
            f" and (changes({XID}{WITH_JOB}[{changes}]{o}) > 0))",
        )
    )
    return rules


def _job_rules(names: RuleNames, interval: int) -> list[str]:
    w, o = names.span, names.offset
    per_gpu = f"max by ({GPU_KEY})"

    def total(function: str, field: str) -> str:
        return f"sum by (hpc_job) ({per_gpu} ({function}({field}{WITH_JOB}[{w}]{o})))"

    def mean(field: str) -> str:
        return f"{total('sum_over_time', field)} / {total('count_over_time', field)}"

    throttle = f"{THROTTLE}{WITH_JOB}"
    return [
        _rule(
            names.job(UTIL, "observed_gpu_seconds"),
            f"{total('count_over_time', UTIL)} * {interval}",
        ),
        _rule(
            names.job(SM_ACTIVE, "useful_gpu_seconds"),
            f"{total('sum_over_time', SM_ACTIVE)} * {interval}",
        ),
        _rule(names.job(UTIL, "ratio_avg"), f"{mean(UTIL)} / 100"),
        _rule(names.job(SM_ACTIVE, "avg"), mean(SM_ACTIVE)),
        _rule(names.job(SM_CLOCK, "avg"), mean(SM_CLOCK)),
        _rule(
            names.job(THROTTLE, "slowdown_ratio"),
            f"avg by (hpc_job) ({per_gpu}"
            f" (avg_over_time(({_slowdown(throttle)})[{w}:{interval}s]{o})))",
        ),
    ]


def engine_rules_yaml(
    *,
    scrape_interval_seconds: int = SHIPPED_SCRAPE_INTERVAL_SECONDS,
    window_seconds: int = SHIPPED_WINDOW_SECONDS,
    delay_seconds: int | None = None,
) -> str:
    """The rule file (YAML text) for an engine scraping dcgm-exporter every
    ``scrape_interval_seconds``, evaluated every ``window_seconds`` over that window ending
    ``delay_seconds`` (default: one scrape interval) before the evaluation."""
    delay_seconds = delay_seconds_for(scrape_interval_seconds, delay_seconds)
    if scrape_interval_seconds < 1 or window_seconds < scrape_interval_seconds:
        raise ValueError("the window must hold at least one scrape interval (whole seconds)")
    if delay_seconds < 0:
        raise ValueError("the delay is whole seconds, 0 or more")
    names = RuleNames(window_seconds, delay_seconds)
    interval = scrape_interval_seconds
    command = (
        f"hpcscope deploy prometheus-rules --scrape-interval {interval} --window {window_seconds}"
        f" --delay {delay_seconds}"
    )
    header = f"""\
# hpcscope's engine recording rules: what the prometheus backend reads instead of raw samples
# (docs/storage.md), generated by
# `{command}`:
# dcgm-exporter scraped every {interval} s, rules evaluated every {names.window} over {names.window}
# ending {delay_seconds} s before the evaluation (samples ingested late still count).
# A sample weighs one scrape interval: regenerate the file when the interval changes.
#
# Sources: dcgm-exporter with hpcscope's counters (deploy/dcgm-exporter/hpcscope-counters.csv)
# and the `hpc_job` label the Slurm prolog injects; every target carries a `node` label.
# Load with `rule_files:` (Prometheus) or `-rule=` (vmalert). Tested with
# `promtool test rules hpcscope-engine-rules.test.yml` (run by hpcscope's test suite).
groups:
"""
    body = f"  - name: hpcscope-engine-gpu\n    interval: {names.window}\n    rules:\n"
    body += "".join(_gpu_rules(names, interval))
    body += f"  - name: hpcscope-engine-job\n    interval: {names.window}\n    rules:\n"
    body += "".join(_job_rules(names, interval))
    return header + body
