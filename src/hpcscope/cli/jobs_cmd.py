"""``hpcscope jobs``, ``hpcscope job JOBID`` and ``hpcscope job report JOBID``: the
reported-vs-real report; ``job report`` adds the per-GPU memory and the notes (what is wrong,
the threshold, what to do: ``docs/notifications.md``).

Against a running server (``--url``, credentials from ``--user``/``--password`` or
``HPCSCOPE_USER``/``HPCSCOPE_PASSWORD``) — the server applies access control — or offline
against a store file no server holds (``--store``; reading the file directly requires file
access, so it is an admin view).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from hpcscope.cli.client import (
    FORMAT_OPTION,
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
)
from hpcscope.cli.output import (
    EXIT_USAGE_ERROR,
    fail,
    print_json,
    print_table,
    stdout_console,
)
from hpcscope.cli.tables import Column, table_format

STORE_OPTION = typer.Option(None, "--store", help="Read this store file offline instead.")

#: ``hpcscope jobs``: ids, names, users and verdicts always; the rest left out on a narrow
#: terminal, the highest priority first (``cli/tables.py``).
JOBS_COLUMNS = (
    Column("job id", priority=0),
    Column("job name", priority=0),
    Column("user", priority=0),
    Column("account", priority=3),
    Column("state", priority=2),
    Column("GPUs", priority=2, numeric=True),
    Column("reported util", priority=1, numeric=True),
    Column("real (SM active)", priority=1, numeric=True),
    Column("useful GPU-h", priority=3, numeric=True),
    Column("allocated GPU-h", priority=4, numeric=True),
    Column("verdict", priority=0),
)

#: ``hpcscope job``: one row per GPU.
GPU_COLUMNS = (
    Column("node", priority=0),
    Column("GPU", priority=0, numeric=True),
    Column("reported util", priority=1, numeric=True),
    Column("real (SM active)", priority=1, numeric=True),
    Column("tensor active", priority=2, numeric=True),
    Column("max °C", priority=2, numeric=True),
    Column("Xid", priority=1),
    Column("verdict", priority=0),
)

#: ``hpcscope job``: the job's alerts; ``subject`` is what the alert is about (a rank, a path,
#: a process), free text that wraps.
JOB_ALERT_COLUMNS = (
    Column("severity", priority=1),
    Column("rule", priority=0),
    Column("what", priority=1, wrap=True),
    Column("subject (rank, path, ...)", priority=2, wrap=True),
    Column("node", priority=0),
    Column("GPU", priority=3, numeric=True),
    Column("step", priority=3, numeric=True),
    Column("count", priority=3, numeric=True),
    Column("state", priority=1),
)


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)
    app.command("job")(job)


def _offline(store: Path, job_id: str | None, as_json: bool, *, notes: bool = False) -> Any:
    from hpcscope.model.access import system_principal
    from hpcscope.model.errors import StoreError
    from hpcscope.service.alerts.contracts import JobReportWithAlerts
    from hpcscope.service.core import Service
    from hpcscope.service.jobs.contracts import JobList, JobReportDocument
    from hpcscope.service.settings import Settings
    from hpcscope.service.traces.capture_contracts import JobReportWithPhases
    from hpcscope.service.traces.job_phases import job_phases

    try:
        service = Service.open_read_only(Settings(store_path=store))
    except StoreError as exc:
        fail(str(exc), as_json=as_json)
    try:
        admin = system_principal("local-file")
        if job_id is None:
            return JobList.from_reports(service.job_reports(admin)).model_dump(mode="json")
        report = service.job_report(admin, job_id)
        if report is None:
            fail(f"no job {job_id} in {store}", as_json=as_json)
        alerts = service.job_alerts(admin, job_id) or []
        document = JobReportWithAlerts.of(JobReportDocument.from_report(report), alerts)
        phases = job_phases(service, admin, job_id)
        assert phases is not None  # the admin sees the job (its report is there)
        joined = JobReportWithPhases.join(document, phases).model_dump(mode="json")
        if notes:
            from hpcscope.service.notify.access import notes_for_job

            found = notes_for_job(service, admin, job_id)
            joined["notes"] = found.model_dump(mode="json") if found is not None else None
        return joined
    finally:
        service.close()


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f} %"


def _hours(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def jobs(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    store: Path | None = STORE_OPTION,
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """List your jobs: reported GPU utilization beside real efficiency, GPU-hours, verdict."""
    fmt = table_format(output_format)
    data = (
        _offline(store, None, json_output)
        if store is not None
        else api_get(url, "/api/jobs", user, password, json_output, token=token)
    )
    if json_output:
        print_json(data)
        return
    rows = [
        [
            j["job_id"],
            j["name"],
            j["user"],
            j["account"],
            j["state"],
            j["gpus_allocated"] if j["gpus_allocated"] is not None else j["gpus_observed"],
            _pct(j["reported_util_ratio"]),
            _pct(j["sm_active_ratio"]),
            _hours(j["useful_gpu_hours"]),
            _hours(
                j["allocated_gpu_hours"]
                if j["allocated_gpu_hours"] is not None
                else j["observed_gpu_hours"]
            ),
            j["verdict"],
        ]
        for j in data["jobs"]
    ]
    print_table(
        "Jobs: reported GPU utilization beside real efficiency (SM active)",
        JOBS_COLUMNS,
        rows,
        fmt=fmt,
    )


def job(
    job_id: str = typer.Argument(
        ...,
        metavar="[report] JOBID",
        help="Slurm job id (123, 123_4, 123+1); 'report JOBID' adds the per-GPU memory and "
        "the notes: what is wrong, the threshold crossed and what to do.",
    ),
    report_of: str | None = typer.Argument(None, hidden=True),
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    store: Path | None = STORE_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """One job's report: verdict, reported vs real, GPU-hours and cost, per-GPU detail, alerts.

    ``hpcscope job report JOBID`` adds the per-GPU table with memory and the job's notes
    (low real efficiency, over-requested GPUs, data-starved, straggler GPU, memory headroom,
    GPU errors), each with its threshold and what to do.
    """
    full = job_id == "report"
    if full:
        if report_of is None:
            fail("job report needs a JOBID", code=EXIT_USAGE_ERROR, as_json=json_output)
        job_id = report_of
    elif report_of is not None:
        fail(f"unexpected argument {report_of!r}", code=EXIT_USAGE_ERROR, as_json=json_output)
    if store is not None:
        data = _offline(store, job_id, json_output, notes=full)
    else:
        data = api_get(url, f"/api/jobs/{job_id}", user, password, json_output, token=token)
        if full:
            data["notes"] = api_get(
                url, f"/api/jobs/{job_id}/notes", user, password, json_output, token=token
            )
    if json_output:
        print_json(data)
        return
    if full:
        _print_full_report(data)
        return
    console = stdout_console()
    console.print(
        f"[bold]Job {data['job_id']}[/] {data['name'] or ''} — "
        f"{data['user'] or '?'} / {data['account'] or '?'} — {data['state'] or '?'}"
    )
    console.print(data["explanation"], highlight=False)
    if data.get("source") == "summary":
        console.print("summarised: figures from the summary kept when the job ended", style="dim")
    console.print(
        f"reported GPU utilization {_pct(data['reported_util_ratio'])} · real efficiency "
        f"(SM active) {_pct(data['sm_active_ratio'])} · tensor active "
        f"{_pct(data['tensor_active_ratio'])}",
        highlight=False,
    )
    console.print(
        f"GPU-hours: useful {_hours(data['useful_gpu_hours'])} / allocated "
        f"{_hours(data['allocated_gpu_hours'])} · lost {data['cost_lost'] or 0:.2f} "
        f"{data['currency']}",
        highlight=False,
    )
    rows = [
        [
            g["node"],
            g["gpu"],
            _pct(g["reported_util_ratio"]),
            _pct(g["sm_active_ratio"]),
            _pct(g["tensor_active_ratio"]),
            "—" if g["max_temperature_celsius"] is None else f"{g['max_temperature_celsius']:.0f}",
            g["xid"] or "",
            g["verdict"],
        ]
        for g in data["gpus"]
    ]
    print_table(None, GPU_COLUMNS, rows)
    alerts = data.get("alerts") or []
    if alerts:
        print_table(
            "Alerts",
            JOB_ALERT_COLUMNS,
            [
                [
                    a["severity"],
                    a["rule_id"],
                    a["title"],
                    a["subject"] or "",
                    a["node"] or "",
                    "" if a["gpu"] is None else a["gpu"],
                    "" if a["step"] is None else a["step"],
                    a["count"],
                    a["state"],
                ]
                for a in alerts
            ],
        )
    _print_phases(data.get("phases"))


def _gib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**30:.1f}"


# The server's JSON as sent (JobReportDocument): a client command does not import the contracts
# (pydantic) to stay light on start-up.
def _print_full_report(data: dict[str, Any]) -> None:
    """The job report as ``jobstats`` lays one out: header, figures, per-GPU table, notes."""
    console = stdout_console()
    console.print(
        f"[bold]Job {data['job_id']}[/] {data['name'] or ''} — "
        f"{data['user'] or '?'} / {data['account'] or '?'} — {data['state'] or '?'}"
    )
    elapsed = data.get("elapsed_seconds")
    console.print(
        f"partition {data['partition'] or '?'} · GPUs allocated "
        f"{data['gpus_allocated'] if data['gpus_allocated'] is not None else '?'} · run time "
        f"{'—' if elapsed is None else f'{elapsed / 60:.0f} min'} · GPU-hours useful "
        f"{_hours(data['useful_gpu_hours'])} of {_hours(data['allocated_gpu_hours'])} allocated",
        highlight=False,
    )
    console.print(
        f"reported GPU utilization {_pct(data['reported_util_ratio'])} · real efficiency "
        f"(SM active) {_pct(data['sm_active_ratio'])}",
        highlight=False,
    )
    notes = data.get("notes") or {"gpus": [], "notes": []}
    memory = {(g["node"], g["gpu"]): g for g in notes["gpus"]}
    rows = []
    for g in data["gpus"]:
        mem = memory.get((g["node"], g["gpu"]), {})
        rows.append(
            [
                g["node"],
                g["gpu"],
                _pct(g["reported_util_ratio"]),
                _pct(g["sm_active_ratio"]),
                f"{_gib(mem.get('max_fb_used_bytes'))}/{_gib(mem.get('fb_total_bytes'))}",
                _pct(mem.get("memory_used_ratio")),
                "—"
                if g["max_temperature_celsius"] is None
                else f"{g['max_temperature_celsius']:.0f}",
                g["xid"] or "",
                g["verdict"],
            ]
        )
    print_table(
        "GPUs",
        [
            *GPU_COLUMNS[:4],
            Column("peak memory GiB used/total", priority=1, numeric=True),
            Column("memory used", priority=2, numeric=True),
            *GPU_COLUMNS[5:],
        ],
        rows,
    )
    if not notes["notes"]:
        console.print("Notes: none — nothing to change.", highlight=False)
        return
    console.print("[bold]Notes[/]")
    for note in notes["notes"]:
        console.print(
            f"* {note['level'].upper()}: {note['problem']}", highlight=False, markup=False
        )
        console.print(f"  threshold: {note['threshold']}", highlight=False, markup=False)
        console.print(f"  what to do: {note['advice']}", highlight=False, markup=False)


# The server's JSON as sent (JobPhases), for the same reason.
def _print_phases(phases: dict[str, Any] | None) -> None:
    """The newest capture window: the straggler, the What-if gain, phases per rank."""
    console = stdout_console()
    if not phases:
        return
    if not phases["captured"]:
        console.print(f"phases: {phases['reason']}", style="dim", highlight=False)
        console.print(f"to enable: {phases['how_to_enable']}", style="dim", highlight=False)
        return
    window = phases["windows"][0]
    straggler = window["straggler"]
    if straggler is None:
        console.print(f"phases (window {window['window']}): no straggler", highlight=False)
    else:
        where = straggler["node"] or "?"
        if straggler["gpu"] is not None:
            where += f" GPU {straggler['gpu']}"
        console.print(
            f"[bold]straggler[/]: rank {straggler['rank']} on {where}, phase "
            f"{straggler['phase']}, +{straggler['delay_seconds_per_step'] * 1000:.1f} ms per "
            f"step; what-if gain {(window['what_if_gain_seconds_per_step'] or 0) * 1000:.1f} "
            f"ms per step (window {window['window']}, {window['attribution']})",
            highlight=False,
        )
    names = ["data_load", "forward", "backward", "communication", "optimizer", "barrier_wait"]
    print_table(
        "Phases per rank (ms per step, mean over the window's steps)",
        [
            Column("rank", priority=0, numeric=True),
            Column("node", priority=0),
            *(Column(f"{p.replace('_', ' ')} ms", priority=1, numeric=True) for p in names),
        ],
        [
            [
                rank,
                window["placement"].get(rank, {}).get("node", ""),
                *(f"{values[p] * 1000:.1f}" for p in names),
            ]
            for rank, values in sorted(window["phases_per_rank"].items(), key=lambda kv: int(kv[0]))
        ],
    )
