"""``hpcscope jobs`` and ``hpcscope job JOBID``: the reported-vs-real report.

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
    JSON_OPTION,
    PASSWORD_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
)
from hpcscope.cli.output import (
    fail,
    print_json,
    print_table,
    stdout_console,
)

STORE_OPTION = typer.Option(None, "--store", help="Read this store file offline instead.")


def register(app: typer.Typer) -> None:
    app.command("jobs")(jobs)
    app.command("job")(job)


def _offline(store: Path, job_id: str | None, as_json: bool) -> Any:
    from hpcscope.model.access import system_principal
    from hpcscope.service.alerts.contracts import JobReportWithAlerts
    from hpcscope.service.core import Service
    from hpcscope.service.jobs.contracts import JobList, JobReportDocument
    from hpcscope.service.settings import Settings
    from hpcscope.service.traces.capture_contracts import JobReportWithPhases
    from hpcscope.service.traces.job_phases import job_phases
    from hpcscope.store import StoreError

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
        return JobReportWithPhases.join(document, phases).model_dump(mode="json")
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
    store: Path | None = STORE_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """List your jobs: reported GPU utilization beside real efficiency, GPU-hours, verdict."""
    data = (
        _offline(store, None, json_output)
        if store is not None
        else api_get(url, "/api/jobs", user, password, json_output)
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
        "Jobs (util = reported GPU utilization, SM = real efficiency)",
        [
            "job",
            "name",
            "user",
            "account",
            "state",
            "GPUs",
            "util",
            "SM active",
            "useful GPU-h",
            "allocated GPU-h",
            "verdict",
        ],
        rows,
        numeric=["GPUs", "util", "SM active", "useful GPU-h", "allocated GPU-h"],
    )


def job(
    job_id: str = typer.Argument(..., help="Slurm job id (123, 123_4, 123+1)."),
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    store: Path | None = STORE_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """One job's report: verdict, reported vs real, GPU-hours and cost, per-GPU detail, alerts."""
    data = (
        _offline(store, job_id, json_output)
        if store is not None
        else api_get(url, f"/api/jobs/{job_id}", user, password, json_output)
    )
    if json_output:
        print_json(data)
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
    print_table(
        None,
        ["node", "GPU", "util", "SM active", "tensor", "max °C", "Xid", "verdict"],
        rows,
        numeric=["GPU", "util", "SM active", "tensor", "max °C"],
    )
    alerts = data.get("alerts") or []
    if alerts:
        print_table(
            "Alerts",
            ["severity", "rule", "what", "rank", "node", "GPU", "step", "count", "state"],
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
            numeric=["GPU", "step", "count"],
        )
    _print_phases(data.get("phases"))


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
        ["rank", "node", *names],
        [
            [
                rank,
                window["placement"].get(rank, {}).get("node", ""),
                *(f"{values[p] * 1000:.1f}" for p in names),
            ]
            for rank, values in sorted(window["phases_per_rank"].items(), key=lambda kv: int(kv[0]))
        ],
        numeric=names,
    )
