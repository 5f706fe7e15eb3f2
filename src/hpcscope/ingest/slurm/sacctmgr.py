"""``sacctmgr`` associations and coordinators -> who may charge and who leads which account.

Commands read (``--parsable2``, header kept unless ``fields=`` is given)::

    sacctmgr --parsable2 --noheader show assoc format=cluster,account,user,partition,...
    sacctmgr --parsable2 show user withassoc withcoord \\
        format=user,defaultaccount,account,coordinators,adminlevel
    sacctmgr --parsable2 show account withcoord format=account,...,coordinators

An association row with an empty user is the account itself (a node of the account tree), not a
membership. Coordinator lists (``Coord Accounts`` on users, ``Coordinators``/``Coord Accounts``
on accounts) are comma-separated. The result has
:data:`~hpcscope.model.schemas.ACCOUNT_MEMBERSHIP_SCHEMA`: one row per (user, account), with
``coordinator`` true when the user coordinates that account (a coordinator need not be a member).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from hpcscope.ingest.slurm.common import SchedulerFormatError
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import ACCOUNT_MEMBERSHIP_SCHEMA

_HEADER_NAMES = {
    "user": "user",
    "account": "account",
    "cluster": "cluster",
    "partition": "partition",
    "coord accounts": "coordinators",
    "coordinators": "coordinators",
    "def acct": "defaultaccount",
    "defaultaccount": "defaultaccount",
    "par name": "parentname",
    "parentname": "parentname",
    "admin": "adminlevel",
    "adminlevel": "adminlevel",
    "descr": "description",
    "org": "organization",
}


@dataclass(frozen=True, slots=True)
class SacctmgrRows:
    """Decoded rows (dicts keyed by normalised field names) and warnings."""

    rows: list[dict[str, str]]
    warnings: list[SourceError]


def _normalise(name: str) -> str:
    key = name.strip().lower()
    return _HEADER_NAMES.get(key, key.replace(" ", ""))


def parse_sacctmgr_parsable(
    text: str, *, source: str, fields: Sequence[str] | None = None
) -> SacctmgrRows:
    """Split ``sacctmgr --parsable2`` output into rows keyed by field name.

    Args:
        text: stdout of sacctmgr.
        source: the command, named in errors.
        fields: the ``format=`` list when the output has no header (``--noheader``).

    Raises:
        SchedulerFormatError: no header and no ``fields``, or no row with the right width.
    """
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        return SacctmgrRows([], [])
    if fields is None:
        header_number, header = lines[0]
        names = [_normalise(n) for n in header.rstrip("|").split("|")]
        if not ({"user", "account"} & set(names)):
            raise SchedulerFormatError(
                "no header line (User|Account|...): pass the format= fields",
                source=source,
                line=header_number,
            )
        lines = lines[1:]
    else:
        names = [_normalise(n) for n in fields]
    rows: list[dict[str, str]] = []
    warnings: list[SourceError] = []
    for number, line in lines:
        values = line.split("|")
        if len(values) == len(names) + 1 and values[-1] == "":
            values = values[:-1]  # --parsable (not 2) ends every line with |
        if len(values) != len(names):
            warnings.append(
                SchedulerFormatError(
                    f"{len(values)} fields, expected {len(names)}: line skipped",
                    source=source,
                    line=number,
                )
            )
            continue
        rows.append(dict(zip(names, (v.strip() for v in values), strict=True)))
    if lines and not rows:
        raise SchedulerFormatError(
            f"no line has the {len(names)} expected fields", source=source, line=lines[0][0]
        )
    return SacctmgrRows(rows, warnings)


def account_memberships(
    associations: Iterable[dict[str, str]],
    coordinators: Iterable[dict[str, str]] = (),
    *,
    cluster: str | None = None,
) -> pa.Table:
    """Build the membership table from association rows and coordinator rows.

    Args:
        associations: rows with ``user`` and ``account`` (``show assoc`` or ``show user
            withassoc``); rows without a user are accounts, not memberships.
        coordinators: rows with ``coordinators`` and either a ``user`` column (``show user
            withcoord``: the accounts this user coordinates) or none (``show account
            withcoord``: the users who coordinate that ``account``; sacctmgr labels both
            columns ``Coord Accounts``).
        cluster: keep only associations of this cluster (when rows carry ``cluster``).

    Returns:
        :data:`~hpcscope.model.schemas.ACCOUNT_MEMBERSHIP_SCHEMA`, sorted by user, account.
    """
    members: dict[tuple[str, str], bool] = {}
    for row in associations:
        if cluster and row.get("cluster") and row["cluster"] != cluster:
            continue
        user, account = row.get("user", ""), row.get("account", "")
        if user and account:
            members.setdefault((user, account), False)
    for row in coordinators:
        listed = [c.strip() for c in row.get("coordinators", "").split(",") if c.strip()]
        if not listed:
            continue
        if "user" in row:  # show user withcoord: the accounts this user coordinates
            pairs = [(row["user"], coordinated) for coordinated in listed]
        else:  # show account withcoord: the users who coordinate this account
            pairs = [(coordinator, row.get("account", "")) for coordinator in listed]
        for pair in pairs:
            if pair[0] and pair[1]:
                members[pair] = True
    ordered = sorted(members.items())
    return pa.table(
        {
            "user": [u for (u, _), _ in ordered],
            "account": [a for (_, a), _ in ordered],
            "coordinator": [c for _, c in ordered],
        },
        schema=ACCOUNT_MEMBERSHIP_SCHEMA,
    )
