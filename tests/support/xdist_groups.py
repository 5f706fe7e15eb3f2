"""The xdist groups of ``make test`` (``pytest -n 3 --dist loadgroup``), as a plugin that
``tests/conftest.py`` loads (``tests/test_xdist_groups.py`` loads it alone)."""

from __future__ import annotations

import pytest
from _pytest.nodeid import NodeId

#: Tests that share one machine-wide resource run on one xdist worker, one after the other
#: (``make test`` runs ``pytest -n 3 --dist loadgroup``): real Slurm clusters (munged, MariaDB,
#: slurmd with cgroups on this host) and the root eBPF sensor (bpftrace sees every process's
#: reads, the other tests' too), which one test also runs on Slurm: one group for both.
MACHINE_WIDE_FILES = ("bpftrace", "sensor")


#: A module whose tests share a fixture of module scope (a server, a twin run, a browser, a
#: scored corpus) runs on one worker: split over two, each worker would build the fixture.
SHARED_SCOPES = ("module", "package", "class")


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's resolved fixtures of the test
    return info is not None and any(
        definition.scope in SHARED_SCOPES
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def _group(config: pytest.Config, item: pytest.Item, name: str) -> None:
    """Put ``item`` in xdist group ``name``. pytest-xdist 3.8 groups by an ``@name`` suffix of
    the node id that it writes to ``item._nodeid``, which pytest 9 no longer reads (the id is
    ``item._id``): without the suffix written here, no group holds and the machine-wide tests
    run on both workers at once."""
    item.add_marker(pytest.mark.xdist_group(name))
    if getattr(config.option, "loadgroup", False):  # a worker of --dist loadgroup
        item._id = NodeId.parse(f"{item.nodeid}@{name}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slurm") is not None or any(
            word in item.path.name for word in MACHINE_WIDE_FILES
        ):
            _group(config, item, "machine-wide")
        elif _shares_a_fixture(item):
            _group(config, item, item.nodeid.partition("::")[0])
