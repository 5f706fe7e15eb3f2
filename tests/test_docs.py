"""Docs-drift tests: every setting, CLI command and exported metric family is documented, and
every path, command and option the docs name exists."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.main import get_command

from hpcscope.cli.main import app
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import LEGACY_KEYS, SourceSections

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_every_setting_is_documented() -> None:
    """Every setting but the sources' sections (``docs/sources.md``, generated: checked by
    ``tests/service/sources/test_registry.py``) in the table, every old key in its own."""
    text = (DOCS / "settings.md").read_text()
    current, _, earlier = text.partition("## Settings files of earlier versions")
    row = re.compile(r"^\| `([a-z][a-z0-9_]*)` \|", flags=re.MULTILINE)
    assert set(row.findall(current)) == set(Settings.model_fields) - set(
        SourceSections.model_fields
    )
    assert set(row.findall(earlier)) == set(LEGACY_KEYS)


def _commands(group: typer.Typer) -> set[str]:
    command = get_command(group)
    names: set[str] = set()
    for name, sub in getattr(command, "commands", {}).items():
        names.add(name)
        for child in getattr(sub, "commands", {}):
            names.add(f"{name} {child}")
    return names


def test_every_cli_command_is_documented() -> None:
    text = (DOCS / "cli.md").read_text()
    missing = {name for name in _commands(app) if f"`hpcscope {name}" not in text}
    assert not missing, f"undocumented commands: {sorted(missing)}"


def test_every_exported_metric_family_is_documented() -> None:
    source = (Path(__file__).resolve().parents[1] / "src/hpcscope/serve/metrics.py").read_text()
    families = set(re.findall(r'"(hpcscope_[a-z_]+)"', source))
    text = (DOCS / "metrics.md").read_text()
    missing = {family for family in families if f"`{family}`" not in text}
    assert not missing, f"undocumented metric families: {sorted(missing)}"


# --------------------------------------------------------------------------- docs cannot lie
#
# Every repository path, `hpcscope` command and command option that README.md and docs/*.md
# name must exist: paths on disk, commands and options in the Typer app's command tree.

ROOT = DOCS.parent
SOURCE_ROOT = ROOT / "src" / "hpcscope"
DOC_FILES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

#: Top-level folders a path in the docs may start with: the repository's, and the two that
#: hpcscope and its tests create at run time (only allow-listed paths may be named in those).
REPO_DIRS = ("src", "deploy", "docs", "tests", "bench", "scripts", "topologies")
RUNTIME_DIRS = ("var", "test-artifacts")
#: Package folders: ``service/collect/collector.py`` means ``src/hpcscope/service/...``.
PACKAGE_DIRS = ("model", "ingest", "store", "analysis", "twin", "service", "serve", "cli")

#: Paths named on purpose although not in the checkout (prefixes). Absolute paths (``/etc/...``,
#: ``/run/...``) are the cluster's and never checked. Keep a reason with each entry.
EXTERNAL_ALLOWED: tuple[str, ...] = (
    "var/hpcscope.duckdb",  # the default store, created by the server on first start
    "test-artifacts/",  # screenshots and the access matrix, written by the tests, not committed
    "var/demo/twin/",  # the twin's event files and spools, written when the demo starts
)

_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_PATH = re.compile(rf"^(?:{'|'.join(REPO_DIRS + RUNTIME_DIRS + PACKAGE_DIRS)})/[\w./*<>{{}}-]*$")
_COMMAND = re.compile(r"(?<![\w.-])hpcscope ([a-z][a-z-]*)(?= |$)(.*)")


def _spans(text: str) -> tuple[list[str], list[str]]:
    """(inline code spans outside fences, lines of ``sh`` blocks)."""
    fenced = [
        line
        for info, block in _FENCE.findall(text)
        if info.strip() in ("sh", "bash", "console", "shell")
        for line in block.splitlines()
    ]
    prose = _FENCE.sub("", text)
    return _SPAN.findall(prose), fenced


def _prose_lines(text: str) -> list[str]:
    return _FENCE.sub("", text).splitlines()


def _resolve(path: str) -> bool:
    """Whether a repository path (or a glob over one) exists."""
    path = path.rstrip(".,:;")
    path = re.split(r"::|:\d", path)[0]  # pytest ids and file:line
    if "<" in path or "{" in path:  # a placeholder: check the folder before it
        path = re.split(r"[<{]", path)[0].rsplit("/", 1)[0] or "."
    base = SOURCE_ROOT if path.split("/")[0] in PACKAGE_DIRS else ROOT
    if "*" in path:
        return any(base.glob(path))
    return (base / path).exists()


def _doc_paths() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in DOC_FILES:
        text = doc.read_text()
        spans, _ = _spans(text)
        for span in spans:
            for word in span.split():
                if _PATH.match(word):
                    found.append((doc.name, word))
        for target in _LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            relative = (doc.parent / target).resolve().relative_to(ROOT)
            found.append((doc.name, str(relative)))
    return found


def test_every_path_the_docs_name_exists() -> None:
    paths = _doc_paths()
    assert len(paths) > 40  # guards the extraction itself
    missing = sorted(
        f"{doc}: {path}"
        for doc, path in paths
        if not path.startswith(EXTERNAL_ALLOWED) and not _resolve(path)
    )
    assert not missing, "docs name paths that do not exist:\n" + "\n".join(missing)


def test_every_allowed_external_path_is_still_named() -> None:
    named = {path for _, path in _doc_paths()}
    stale = [entry for entry in EXTERNAL_ALLOWED if not any(p.startswith(entry) for p in named)]
    assert not stale, f"allow-list entries no doc names any more: {stale}"


def test_every_python_module_the_docs_run_exists() -> None:
    modules = {
        (doc.name, match)
        for doc in DOC_FILES
        for match in re.findall(r"python -m ([\w.]+)", doc.read_text())
    }
    assert modules  # guards the extraction itself
    missing = sorted(
        f"{doc}: python -m {module}"
        for doc, module in modules
        if module != "hpcscope"
        and not any(
            (base / f"{module.replace('.', '/')}.py").exists()
            or (base / module.replace(".", "/") / "__main__.py").exists()
            for base in (ROOT, ROOT / "src")
        )
    )
    assert not missing, "docs run modules that do not exist:\n" + "\n".join(missing)


def _command_mentions() -> list[tuple[str, str]]:
    """(doc, text from ``hpcscope`` on) for every command in spans and sh blocks.

    An option in its own span (`` `--targets` ``) belongs to the nearest command span before it
    on the same line (a table row of ``docs/cli.md``, a sentence of the README).
    """
    mentions: list[tuple[str, str]] = []
    for doc in DOC_FILES:
        text = doc.read_text()
        _, fenced = _spans(text)
        for line in fenced:
            mentions += [(doc.name, m.group(0)) for m in _COMMAND.finditer(line)]
        for line in _prose_lines(text):
            command: str | None = None
            for span in _SPAN.findall(line):
                match = _COMMAND.search(span)
                if match:
                    command = match.group(0)
                    mentions.append((doc.name, command))
                elif span.startswith("--") and command is not None:
                    mentions.append((doc.name, f"{command} {span}"))
    return mentions


def _check_command(line: str) -> list[str]:
    """Problems with one ``hpcscope ...`` line: unknown command, sub-command or option."""
    tokens = re.split(r"\s+", line.strip())
    for stop in ("|", "&&", ";", "#", ">", "2>"):
        if stop in tokens:
            tokens = tokens[: tokens.index(stop)]
    command = get_command(app)
    path = ["hpcscope"]
    for token in tokens[1:]:
        if token.startswith(("-", "[")):
            break
        subcommands: dict[str, object] = getattr(command, "commands", {})
        if not subcommands:
            break
        if token not in subcommands:
            return [f"no command `{' '.join([*path, token])}`"]
        command = subcommands[token]  # type: ignore[assignment]
        path.append(token)
    options = {
        opt
        for param in getattr(command, "params", [])
        for opt in [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
    } | {"--help"}  # secondary: the --no-x of a --x/--no-x flag
    return [
        f"`{' '.join(path)}` has no option `{option}`"
        for token in tokens
        if (option := token.strip("[](),").split("=")[0]).startswith("--") and option not in options
    ]


def test_every_command_and_option_the_docs_name_exists() -> None:
    mentions = _command_mentions()
    assert len(mentions) > 10  # guards the extraction itself
    problems = sorted(
        f"{doc}: {problem} (in `{line.strip()}`)"
        for doc, line in mentions
        for problem in _check_command(line)
    )
    assert not problems, "docs name commands or options that do not exist:\n" + "\n".join(problems)


def test_the_checker_catches_an_invented_command_and_option() -> None:
    assert _check_command("hpcscope demo --for 60s") == []
    assert _check_command("hpcscope twin run --seed 1") == []
    assert _check_command("hpcscope teleport") == ["no command `hpcscope teleport`"]
    assert _check_command("hpcscope demo --warp 9") == ["`hpcscope demo` has no option `--warp`"]
    assert not _resolve("deploy/falco/rules.yaml")
    assert _resolve("service/collect/collector.py")


# --------------------------------------------------------------------------- the README's claims


def _readme_layout() -> list[str]:
    """The README's layout block, line by line."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("## Layout") :]
    return block[block.index("```\n") + 4 : block.index("\n```", block.index("```\n") + 4)].split(
        "\n"
    )


def test_the_readme_layout_names_every_package_of_src() -> None:
    lines = _readme_layout()
    start = lines.index("src/hpcscope/")
    named = {
        line.split()[0].rstrip("/")
        for line in lines[start + 1 :]
        if line.startswith("  ") and not line.startswith("   ")
    }
    named = {n for n in named if not n.startswith("(")}
    packages = {p.parent.name for p in SOURCE_ROOT.glob("*/__init__.py")}
    # the layout lists src/hpcscope's packages, then deploy's folders (also indented)
    listed = {n for n in named if (SOURCE_ROOT / n).is_dir()}
    assert listed == packages, f"README layout vs src/hpcscope: {sorted(listed ^ packages)}"


def test_the_readme_names_every_shipped_deploy_folder() -> None:
    lines = _readme_layout()
    block = "\n".join(lines[lines.index(next(x for x in lines if x.startswith("deploy/"))) :])
    shipped = {p.name for p in (ROOT / "deploy").iterdir() if p.is_dir()}
    named = {name for name in shipped if f"  {name}/" in block}
    assert named == shipped, f"deploy/ folders the README layout omits: {sorted(shipped - named)}"


def test_the_readme_counts_the_grafana_dashboards_it_ships() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    dashboards = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"{words[len(dashboards)]} dashboards" in text
    for path in dashboards:  # hpcscope-cluster.json -> "cluster"
        assert path.stem.removeprefix("hpcscope-") in text, path.name


def test_the_readme_screenshots_come_from_one_make_target() -> None:
    text = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"docs/img/straggler-job.png", "docs/img/threats-mode.png"} <= set(images)
    for image in images:
        assert (ROOT / image).stat().st_size > 10_000, image
    assert "`make screenshots`" in text
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^screenshots:", makefile, flags=re.MULTILINE)
    assert "scripts/readme_screenshots.py" in makefile


def test_the_benchmarks_page_is_a_reference_of_at_most_300_lines() -> None:
    """Today's figure per bench, not a run log: a rerun replaces a section's figures."""
    lines = (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    assert len(lines) <= 300, f"docs/benchmarks.md has {len(lines)} lines (at most 300)"
    for line in lines:  # no history: the docs never cite the issue tracker
        assert not re.search(r"\bissue \d+", line, flags=re.IGNORECASE), line
