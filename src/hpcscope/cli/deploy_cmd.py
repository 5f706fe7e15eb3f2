"""``hpcscope deploy``: write the guardrails hpcscope generates for a site."""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json
from hpcscope.model.errors import SourceError

app = typer.Typer(help="Write the guardrails generated from the topology.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="deploy")


@app.command("tetragon")
def tetragon(
    topology: str = typer.Option("2x8-h100", help="Topology file, or a bundled name."),
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the policies into."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write every Tetragon TracingPolicy hpcscope reads: the shipped ones and the crown-jewel
    policy rendered for the topology's weight/dataset roots."""
    from hpcscope.model.topology import load_topology
    from hpcscope.service.security.tetragon_policy import (
        RENDERED_POLICY_FILE,
        policy_header,
        protected_roots,
        render_policy_yaml,
        static_policies,
        topology_policy,
        weight_suffixes,
    )
    from hpcscope.service.settings import bundled_topology

    try:
        path = Path(topology)
        if not path.exists() and not topology.endswith((".yaml", ".yml")):
            path = bundled_topology(topology)
        cluster = load_topology(path)
        policy = topology_policy(cluster)
        files = {p.name: p.read_bytes() for p in static_policies()}
    except (SourceError, ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR, as_json=json_output)
    files[RENDERED_POLICY_FILE] = render_policy_yaml(policy, header=policy_header(cluster)).encode()
    written: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, content in sorted(files.items()):
            target = out / name
            target.write_bytes(content)
            written.append(target)
    except OSError as exc:
        fail(f"{out / name}: cannot write: {exc.strerror}", as_json=json_output)
    if json_output:
        print_json(
            {
                "written": [str(p) for p in written],
                "policy": policy["metadata"]["name"],
                "roots": list(protected_roots(cluster)),
                "weight_suffixes": list(weight_suffixes(cluster)),
            }
        )
    else:
        for target in written:
            typer.echo(str(target))


ENGINE_RULES_FILE = "hpcscope-engine-rules.yml"


@app.command("prometheus-rules")
def prometheus_rules(
    scrape_interval: int = typer.Option(
        15, "--scrape-interval", min=1, help="Seconds between scrapes of dcgm-exporter."
    ),
    window: int = typer.Option(
        60, "--window", min=1, help="Seconds between rule evaluations (and their window)."
    ),
    delay: int | None = typer.Option(
        None,
        "--delay",
        min=0,
        help="Seconds each window ends before its evaluation, so that samples ingested late "
        "still count (default: the scrape interval); hpcscope's prometheus_rule_delay_seconds "
        "must equal it.",
    ),
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the rules into."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the engine recording rules the prometheus backend reads (hpcscope-engine-rules.yml)."""
    from hpcscope.service.backends.engine_rules import delay_seconds_for, engine_rules_yaml

    try:
        text = engine_rules_yaml(
            scrape_interval_seconds=scrape_interval, window_seconds=window, delay_seconds=delay
        )
    except ValueError as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR, as_json=json_output)
    target = out / ENGINE_RULES_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except OSError as exc:
        fail(f"{target}: cannot write: {exc.strerror}", as_json=json_output)
    if json_output:
        print_json(
            {
                "written": [str(target)],
                "scrape_interval_seconds": scrape_interval,
                "window": window,
                "delay_seconds": delay_seconds_for(scrape_interval, delay),
            }
        )
    else:
        typer.echo(str(target))
