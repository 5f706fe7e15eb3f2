"""``hpcscope twin``: run the digital twin, or one standalone dcgm-exporter endpoint."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

import typer

from hpcscope.cli.durations import parse_duration
from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json
from hpcscope.model.errors import SourceError

log = logging.getLogger(__name__)

app = typer.Typer(
    help="The digital twin: a simulated cluster emitting the real formats.", no_args_is_help=True
)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="twin")


def _topology(spec: str) -> object:
    from hpcscope.model.topology import load_topology
    from hpcscope.service.settings import bundled_topology

    path = Path(spec)
    if not path.exists() and not spec.endswith((".yaml", ".yml")):
        path = bundled_topology(spec)
    return load_topology(path)


def _wait(duration: float | None) -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait(duration)


@app.command("run")
def run(
    topology: str = typer.Option("2x8-h100", help="Topology file, or a bundled name."),
    state_dir: Path = typer.Option(Path("var/twin"), help="Mapping files, targets file."),
    seed: int = typer.Option(42, help="Random seed (same seed, same run)."),
    speed: float = typer.Option(1.0, help="Simulated seconds per real second."),
    base_port: int = typer.Option(0, help="First dcgm endpoint port (0: ephemeral)."),
    scenario: str = typer.Option("demo", help="'demo' (one job per profile) or 'empty'."),
    arrivals_per_hour: float = typer.Option(20.0, help="Mean new jobs per simulated hour."),
    duration: str | None = typer.Option(None, "--for", help="Stop after this long (60s, 5m)."),
    json_output: bool = typer.Option(False, "--json", help="Print the run info as JSON."),
) -> None:
    """Run the twin in the foreground; print where its endpoints are, then serve until stopped."""
    from hpcscope.model.topology import Topology
    from hpcscope.twin.cluster import TwinCluster

    try:
        seconds = parse_duration(duration) if duration else None
        cluster_topology = _topology(topology)
        assert isinstance(cluster_topology, Topology)
        twin = TwinCluster(
            cluster_topology,
            state_dir,
            seed=seed,
            speed=speed,
            base_port=base_port,
            scenario=scenario,
            arrivals_per_hour=arrivals_per_hour,
        )
    except (SourceError, ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR, as_json=json_output)
    twin.start()
    info = {
        "topology": cluster_topology.name,
        "targets_file": str(state_dir / "targets.json"),
        "slurmrestd_url": twin.slurmrestd_url,
        "dcgm_ports": twin.dcgm_ports,
        "mapping_root": str(state_dir / "nodes"),
    }
    if json_output:
        print_json(info)
    else:
        typer.echo(
            f"twin {cluster_topology.name}: {len(twin.dcgm_ports)} dcgm endpoints, "
            f"targets in {info['targets_file']}, slurmrestd at {twin.slurmrestd_url}"
        )
    try:
        _wait(seconds)
    finally:
        twin.stop()


@app.command("dcgm-endpoint")
def dcgm_endpoint(
    node: str = typer.Option(..., help="Host name (the hostname label)."),
    mapping_dir: Path = typer.Option(..., help="hpc-job-mapping directory to read."),
    port: int = typer.Option(9400, help="Listen port (0: ephemeral)."),
    host: str = typer.Option("127.0.0.1", help="Listen address."),
    topology: str = typer.Option("2x8-h100", help="Topology giving the GPU model and count."),
    profile: str = typer.Option("healthy", help="Workload of a GPU that the mapping names."),
    duration: str | None = typer.Option(None, "--for", help="Stop after this long."),
    json_output: bool = typer.Option(False, "--json", help="Print the endpoint as JSON."),
) -> None:
    """Serve one node's dcgm-exporter page over an existing mapping directory.

    The same files a real dcgm-exporter reads with ``--hpc-job-mapping-dir``: a GPU whose file
    names a job runs ``profile``; the others are idle."""
    from hpcscope.model.topology import Topology
    from hpcscope.twin.cluster import metrics_route, serve_routes
    from hpcscope.twin.dcgm import mapped_node_endpoint
    from hpcscope.twin.workloads import Profile

    try:
        chosen = Profile(profile)
        seconds = parse_duration(duration) if duration else None
        cluster_topology = _topology(topology)
        assert isinstance(cluster_topology, Topology)
    except (SourceError, ValueError, FileNotFoundError) as exc:
        fail(str(exc), code=EXIT_USAGE_ERROR, as_json=json_output)
    endpoint = mapped_node_endpoint(cluster_topology, node, mapping_dir, profile=chosen)
    server, _ = serve_routes(host, port, {"/metrics": metrics_route(endpoint)})
    bound = server.server_address[1]
    if json_output:
        print_json(
            {"node": node, "url": f"http://{host}:{bound}/metrics", "mapping_dir": str(mapping_dir)}
        )
    else:
        typer.echo(
            f"dcgm endpoint for {node} on http://{host}:{bound}/metrics (mapping {mapping_dir})"
        )
    try:
        _wait(seconds)
    finally:
        server.shutdown()
        server.server_close()


@app.command("attack")
def attack(
    scenario: str = typer.Argument("supply-chain-miner", help="Scenario name (--list)."),
    falco: Path = typer.Option(
        Path("var/demo/twin/falco/events.json"), "--falco", help="Falco file_output to append to."
    ),
    tetragon: Path | None = typer.Option(
        None, "--tetragon", help="Tetragon export to append to (the scenario's Tetragon lines)."
    ),
    job: str | None = typer.Option(None, "--job", help="Play it in this job (Falco cgroups)."),
    node: str | None = typer.Option(None, "--node", help="Play it on this node."),
    list_only: bool = typer.Option(False, "--list", help="List the scenarios and exit."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Play one of the twin's attack (or benign) scenarios: append its real Falco JSON (and
    Tetragon JSON) lines to the files a server tails (``falco_events_path``...)."""
    import time

    from hpcscope.twin.attacks import retarget, scenarios
    from hpcscope.twin.attacks import scenario as find

    now_ns = time.time_ns()
    if list_only:
        found = [
            {"name": s.name, "benign": s.benign, "expected": s.expected,
             "falco_lines": len(s.falco), "tetragon_lines": len(s.tetragon)}
            for s in scenarios(now_ns)
        ]  # fmt: skip
        if json_output:
            print_json({"scenarios": found})
        else:
            for s in scenarios(now_ns):
                rules = ", ".join(f"{k} x{v}" for k, v in s.expected.items()) or "quiet"
                typer.echo(f"{s.name:<26} {rules}")
        return
    try:
        chosen = retarget(find(scenario, now_ns), job_id=job, node=node)
    except KeyError as exc:
        fail(str(exc.args[0]), code=EXIT_USAGE_ERROR, as_json=json_output)
    written: dict[str, int] = {}
    for path, lines in ((falco, chosen.falco), (tetragon, chosen.tetragon)):
        if path is None or not lines:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
        written[str(path)] = len(lines)
    if json_output:
        print_json({"scenario": chosen.name, "written": written, "expected": chosen.expected})
    else:
        for path_name, count in written.items():
            typer.echo(f"{chosen.name}: {count} lines appended to {path_name}")
        if not written:
            typer.echo(f"{chosen.name}: nothing to write (no --tetragon for its Tetragon lines?)")
