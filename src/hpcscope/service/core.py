"""The service object: what the web app and the CLI call.

One :class:`Service` per server process. It owns the store (and so the DuckDB file), the
topology, the element catalog and the user directory. Every read of job data takes the
authenticated :class:`~hpcscope.model.access.Principal` and constrains the query at the data
layer with the principal's :class:`~hpcscope.model.access.JobScope`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hpcscope.model.access import Principal
from hpcscope.model.catalog import Catalog, default_catalog
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.settings import Settings
from hpcscope.service.users import UserDirectory
from hpcscope.store import Store

log = logging.getLogger(__name__)


@dataclass
class Service:
    """Everything a running hpcscope server holds."""

    settings: Settings
    topology: Topology
    store: Store
    users: UserDirectory
    catalog: Catalog = field(default_factory=default_catalog)

    @classmethod
    def open(cls, settings: Settings, *, users: UserDirectory | None = None) -> Service:
        """Load the topology and users, open (and migrate) the store."""
        topology = load_topology(settings.resolved_topology_path())
        if users is None:
            users = (
                UserDirectory.from_file(settings.users_path)
                if settings.users_path is not None
                else UserDirectory.demo()
            )
        store = Store(settings.store_path)
        return cls(settings=settings, topology=topology, store=store, users=users)

    def close(self) -> None:
        self.store.close()

    def principal(self, name: str) -> Principal | None:
        """The principal for a logged-in user name, with Slurm coordinator rights merged."""
        coordinated = self.store.coordinated_accounts(name)
        return self.users.principal(name, coordinated_from_slurm=coordinated)
