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
