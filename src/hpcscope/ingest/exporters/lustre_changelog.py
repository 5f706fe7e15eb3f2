"""Lustre MDT changelog records (``lfs changelog <fsname>-MDT<n>``) -> Arrow.

One record a line, as ``lfs changelog`` prints it (Lustre manual, "Working with Changelogs")::

    2 01CREAT 15:15:36.687592024 2026.12.01 0x0 t=[0x200000402:0x2:0x0] j=4410002:0:gpu02 \
ef=0xf u=1001:1001 nid=10.1.0.12@o2ib p=[0x200000402:0x1:0x0] shard-0001.tar
    8 08RENME 15:16:57.467858399 2026.12.01 0x0 t=[0:0x0:0x0] j=mv.1001 ef=0xf u=1001:1001 \
nid=10.1.0.12@o2ib p=[0x200000402:0x1:0x0] new.tar s=[0x200000402:0x4:0x0] \
sp=[0x200000402:0x1:0x0] old.tar
    13 14SATTR 15:17:03.222346157 2026.12.01 0x14 t=[0x200000402:0x5:0x0] j=touch.0 ef=0xf \
u=0:0 nid=0@lo

Fields: index, ``NNTYPE`` (number and name), time and date (the MDS clock; read as UTC),
flags, then ``key=value`` pairs (``t`` target FID, ``j`` jobid, ``ef`` extra-field flags,
``u`` uid:gid, ``nid`` client NID, ``p`` parent FID, ``s``/``sp`` the renamed source and its
parent) and names: the entry's name after ``p=``, the old name after ``sp=``. Optional fields
(``j``, ``ef``, ``u``, ``nid``) appear only when the changelog mask and ``ef`` flags ask for
them. ``jobid`` is split by the same site pattern as job_stats (``lustre_jobid_pattern``).

Paths: records name FIDs, not paths. ``resolve`` (``lfs fid2path <fsname> <fid>`` in
production; a map in tests and the twin) turns the parent FID (or, for records without a
parent such as SATTR or TRUNC, the target FID) into a path; the record's ``path`` is null when
it cannot be resolved (the file is gone).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.exporters.lustre_jobstats import DEFAULT_JOBID_PATTERN, compile_jobid_pattern
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import LUSTRE_CHANGELOG_SCHEMA

_HEAD = re.compile(
    r"(?P<index>\d+) (?P<num>\d{2})(?P<type>[A-Z]{4,5}) "
    r"(?P<time>\d{2}:\d{2}:\d{2}\.\d{1,9}) (?P<date>\d{4}\.\d{2}\.\d{2}) (?P<flags>0x[0-9a-fA-F]+)"
)
_FID = re.compile(r"\[0x[0-9a-fA-F]+:0x[0-9a-fA-F]+:0x[0-9a-fA-F]+\]|\[0:0x0:0x0\]")

FidResolver = Callable[[str], str | None]
"""FID (``[0x200000402:0x1:0x0]``) -> its path, or None when unknown."""


class ChangelogFormatError(SourceError):
    """A changelog line that cannot be read (the line and column are named)."""


@dataclass(frozen=True, slots=True)
class ChangelogParse:
    """The records read and the lines that could not be (the rest are kept)."""

    table: pa.Table
    errors: list[ChangelogFormatError] = field(default_factory=list)


def _timestamp(time: str, date: str) -> datetime:
    hms, frac = time.split(".")
    micros = int((frac + "000000")[:6])
    return datetime.strptime(f"{date} {hms}", "%Y.%m.%d %H:%M:%S").replace(microsecond=micros)


def parse_changelog(
    text: str,
    *,
    mdt: str,
    source: str,
    resolve: FidResolver | None = None,
    jobid_pattern: str | re.Pattern[str] = DEFAULT_JOBID_PATTERN,
    first_line: int = 1,
) -> ChangelogParse:
    """Read ``lfs changelog`` output of one MDT.

    Args:
        text: the output (one record a line; blank lines skipped).
        mdt: the MDT the records came from (``lustre-MDT0000``).
        source: what to name in errors (the spool file).
        resolve: FID -> path (module docstring); without it ``path`` stays null.
        jobid_pattern: the site's jobid regex (named groups ``job``, optional ``host``).
        first_line: the line number of the text's first line in ``source``.

    Returns:
        The records, and a :class:`ChangelogFormatError` per line that could not be read.
    """
    pattern = compile_jobid_pattern(jobid_pattern)
    rows: list[dict[str, object]] = []
    errors: list[ChangelogFormatError] = []
    for offset, line in enumerate(text.splitlines()):
        number = first_line + offset
        if not line.strip():
            continue
        head = _HEAD.match(line)
        if head is None:
            errors.append(
                ChangelogFormatError(
                    "not a changelog record (want '<index> <NNTYPE> <time> <date> <flags> ...')",
                    source=source,
                    line=number,
                    column=1,
                )
            )
            continue
        try:
            ts = _timestamp(head["time"], head["date"])
        except ValueError:
            errors.append(
                ChangelogFormatError(
                    f"bad record time {head['date']} {head['time']}",
                    source=source,
                    line=number,
                    column=head.start("time") + 1,
                )
            )
            continue
        row: dict[str, object] = dict.fromkeys(LUSTRE_CHANGELOG_SCHEMA.names)
        row |= {
            "ts": ts,
            "mdt": mdt,
            "record_index": int(head["index"]),
            "record_type": head["type"],
            "flags": head["flags"],
            "source": source,
            "line": number,
        }
        last_key: str | None = None
        bad: str | None = None
        bad_column = head.end() + 1
        for found_token in re.finditer(r"\S+", line[head.end() :]):
            token = found_token.group()
            bad_column = head.end() + found_token.start() + 1
            key, eq, value = token.partition("=")
            if eq and key in {"t", "p", "s", "sp"}:
                if not _FID.fullmatch(value):
                    bad = f"{key}= is not a FID: {value!r}"
                    break
                row[{"t": "target_fid", "p": "parent_fid", "s": "source_fid",
                     "sp": "source_parent_fid"}[key]] = value  # fmt: skip
                last_key = key
            elif eq and key == "j":
                row["job_id_raw"] = value
                found = pattern.fullmatch(value)
                if found is not None:
                    row["job_id"] = found["job"]
                    row["host"] = found.groupdict().get("host")
                last_key = key
            elif eq and key == "u":
                uid, _, gid = value.partition(":")
                if not uid.isdigit() or (gid and not gid.isdigit()):
                    bad = f"u= is not uid:gid: {value!r}"
                    break
                row["uid"], row["gid"] = int(uid), int(gid) if gid else None
                last_key = key
            elif eq and key in {"nid", "ef", "m", "x", "mt", "cm"}:
                if key == "nid":
                    row["nid"] = value
                last_key = key
            elif last_key == "p" and row["name"] is None:
                row["name"] = token
            elif last_key == "sp" and row["source_name"] is None:
                row["source_name"] = token
            else:
                last_key = None  # an unknown field of a newer Lustre: ignored
        if bad is not None:
            errors.append(ChangelogFormatError(bad, source=source, line=number, column=bad_column))
            continue
        if resolve is not None:
            parent = row["parent_fid"]
            if parent is not None and row["name"] is not None:
                base = resolve(str(parent))
                row["path"] = None if base is None else f"{base.rstrip('/')}/{row['name']}"
            elif row["target_fid"] is not None:
                row["path"] = resolve(str(row["target_fid"]))
        rows.append(row)
    return ChangelogParse(pa.Table.from_pylist(rows, schema=LUSTRE_CHANGELOG_SCHEMA), errors)
