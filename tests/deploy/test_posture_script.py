"""The node's posture check end to end: ``deploy/posture/hpcscope-posture`` run by /bin/sh with
fake ``runc``/``nvidia-ctk`` on PATH and a configuration tree, a real node_exporter serving
its textfile, the real collector scraping it, the telemetry rules judging the stored check."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from hpcscope.model.access import JobScope
from hpcscope.model.timeutil import utcnow
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import DcgmSection, NodeSection
from hpcscope.service.telemetry_rules.engine import TelemetryRules
from hpcscope.store import Store
from hpcscope.store.alerts import alerts
from hpcscope.store.node_facts import latest_posture
from tests.support.collect import collector_for
from tests.support.node_exporter import node_exporter
from tests.support.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "posture" / "hpcscope-posture"
SYSFS = REPO_ROOT / "tests" / "fixtures" / "infiniband" / "sysfs_h100_gpud"
#: What the real tools print (runc 1.1.11, NVIDIA Container Toolkit 1.17.4).
RUNC = "runc version 1.1.11\ncommit: v1.1.11-0-g4bccb38c\nspec: 1.0.2-dev\ngo: go1.20.12\n"
NVIDIA_CTK = "NVIDIA Container Toolkit CLI version 1.17.4\ncommit: 9b69590c7428470a72f2ae05f\n"


def _tool(bin_dir: Path, name: str, output: str) -> None:
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\ncat <<'END'\n{output}END\n")
    tool.chmod(0o755)


def _site(tmp_path: Path) -> tuple[dict[str, str], Path, Path]:
    """A node: fake tools, an etc tree with setuid Apptainer, an epilog without a GPU reset,
    two datasets (one URL list without hashes); returns the environment and the roots."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "runc", RUNC)
    _tool(bin_dir, "nvidia-ctk", NVIDIA_CTK)
    etc = tmp_path / "root"
    (etc / "etc" / "apptainer").mkdir(parents=True)
    (etc / "etc" / "apptainer" / "apptainer.conf").write_text("allow setuid = yes\n")
    starter = etc / "usr" / "libexec" / "apptainer" / "bin" / "starter-suid"
    starter.parent.mkdir(parents=True)
    starter.write_text("")
    starter.chmod(0o4755)
    (etc / "etc" / "pip.conf").write_text("[global]\nindex-url = https://pypi.org/simple\n")
    epilog = tmp_path / "epilog"
    epilog.write_text("#!/bin/sh\n# nvidia-smi -r would go here\nexit 0\n")
    web, curated = tmp_path / "datasets" / "web", tmp_path / "datasets" / "curated"
    web.mkdir(parents=True)
    curated.mkdir()
    (web / "urls.tsv").write_text("url\tcaption\nhttps://example.org/a.jpg\ta cat\n")
    (curated / "urls.tsv").write_text(
        "url\tcaption\tsha256\nhttps://example.org/b.jpg\tb\t" + "ab" * 32 + "\n"
    )
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HPCSCOPE_POSTURE_ETC": str(etc),
        "HPCSCOPE_POSTURE_PYTHONS": sys.executable,
        "HPCSCOPE_POSTURE_EPILOGS": str(epilog),
        "HPCSCOPE_NVIDIA_PARAMS": str(tmp_path / "no-driver"),
    }
    return env, web, curated


def test_the_check_reaches_the_rules_through_node_exporter(tmp_path: Path) -> None:
    env, web, curated = _site(tmp_path)
    textfiles = tmp_path / "textfile"
    done = subprocess.run(
        ["/bin/sh", str(SCRIPT), "-d", str(textfiles), "-D", str(web), "-D", str(curated)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not [p for p in textfiles.iterdir() if p.name.startswith(".")]  # renamed into place
    store = Store(tmp_path / "store.duckdb")
    try:
        with node_exporter(
            SYSFS,
            collectors=("infiniband", "textfile"),
            extra_args=(f"--collector.textfile.directory={textfiles}",),
        ) as url:
            host_port = url.removeprefix("http://").removesuffix("/metrics")
            targets = [{"targets": [host_port], "labels": {"exporter": "node", "node": "gpu05"}}]
            (tmp_path / "targets.json").write_text(json.dumps(targets))
            collector = collector_for(
                store,
                Settings(
                    dcgm=DcgmSection(targets_path=tmp_path / "targets.json"),
                    node=NodeSection(targets_path=tmp_path / "targets.json"),
                ),
            )

            async def run() -> None:
                try:
                    await collector.collect_once()
                    await collector.collect_once()  # the same check again: stored once
                finally:
                    await collector.aclose()

            asyncio.run(run())
        store.flush()
        facts = latest_posture(store, until=utcnow()).to_pylist()
        versions = {r["name"]: r["value"] for r in facts if r["kind"] == "version"}
        assert versions["runc"] == "1.1.11"
        assert versions["nvidia-container-toolkit"] == "1.17.4"
        assert versions["torch"]  # this interpreter's own torch
        assert len(facts) == len({(r["kind"], r["name"]) for r in facts})
        TelemetryRules(store, load_site_rules(None)).evaluate_once()
        found = {(a.rule_id, a.subject) for a in alerts(store, JobScope(all_jobs=True))}
        assert found == {
            ("CE-5", "runc 1.1.11"),
            ("CE-5", "nvidia-container-toolkit 1.17.4"),
            ("CE-5", "setuid_apptainer"),
            ("GM-5", "epilog_without_gpu_reset"),
            ("DP-3", str(web)),
        }
    finally:
        store.close()


def test_a_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(["/bin/sh", str(SCRIPT), "-x"], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"]}, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 2 and "usage" in done.stderr


def test_an_epilog_that_resets_the_gpus_clears_the_flag(tmp_path: Path) -> None:
    env, _, _ = _site(tmp_path)
    Path(env["HPCSCOPE_POSTURE_EPILOGS"]).write_text("#!/bin/sh\nnvidia-smi -r -i 0\n")
    done = subprocess.run(["/bin/sh", str(SCRIPT), "-d", str(tmp_path / "t")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "t" / "hpcscope_posture.prom").read_text()
    assert 'hpcscope_posture_flag{flag="epilog_without_gpu_reset"} 0' in text
    assert "hpcscope_posture_dataset_item_hashes" not in text  # no dataset root given


def test_the_shipped_unit_runs_the_script_with_flags_it_accepts(tmp_path: Path) -> None:
    import configparser
    import shlex

    unit = configparser.ConfigParser(interpolation=None)
    unit.read(SCRIPT.parent / "hpcscope-posture.service")
    args = shlex.split(unit["Service"]["ExecStart"])
    assert args[0] == "/usr/local/sbin/hpcscope-posture"
    args[args.index("-d") + 1] = str(tmp_path / "textfile")
    env, _, _ = _site(tmp_path)
    done = subprocess.run(["/bin/sh", str(SCRIPT), *args[1:]], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "textfile" / "hpcscope_posture.prom").is_file()
    timer = configparser.ConfigParser(interpolation=None)
    timer.read(SCRIPT.parent / "hpcscope-posture.timer")
    assert timer["Timer"]["OnCalendar"] == "daily"
