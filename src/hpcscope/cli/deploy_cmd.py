"""``hpcscope deploy``: write the guardrails hpcscope generates for a site."""

from __future__ import annotations

from pathlib import Path

import typer

from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json
from hpcscope.model.errors import SourceError

app = typer.Typer(help="Write the guardrails generated from the topology.", no_args_is_help=True)

POLICY_FILE = "hpcscope-weights.yaml"


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="deploy")


@app.command("tetragon")
def tetragon(
    topology: str = typer.Option("2x8-h100", help="Topology file, or a bundled name."),
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the policy into."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the crown-jewel Tetragon TracingPolicy for the topology's weight/dataset roots."""
    from hpcscope.model.topology import load_topology
    from hpcscope.service.security.tetragon_policy import (
        policy_header,
        protected_roots,
        render_policy_yaml,
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
    except (SourceError, ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR, as_json=json_output)
    target = out / POLICY_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
        target.write_text(render_policy_yaml(policy, header=policy_header(cluster)))
    except OSError as exc:
        fail(f"{target}: cannot write: {exc.strerror}", as_json=json_output)
    if json_output:
        print_json(
            {
                "written": [str(target)],
                "policy": policy["metadata"]["name"],
                "roots": list(protected_roots(cluster)),
                "weight_suffixes": list(weight_suffixes(cluster)),
            }
        )
    else:
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
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the rules into."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Write the engine recording rules the prometheus backend reads (hpcscope-engine-rules.yml)."""
    from hpcscope.service.backends.engine_rules import engine_rules_yaml

    try:
        text = engine_rules_yaml(scrape_interval_seconds=scrape_interval, window_seconds=window)
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
            {"written": [str(target)], "scrape_interval_seconds": scrape_interval, "window": window}
        )
    else:
        typer.echo(str(target))
