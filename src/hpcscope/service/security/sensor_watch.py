"""What ``hpcscope sensor`` posts: the selectors of hpcscope's TracingPolicies, as lists.

The sensor writes what Tetragon would export under the policies of ``deploy/tetragon/``
(``docs/security.md``, "Tetragon event shapes the rules read"); the kernel program filters
coarsely (one probe per prefix, a BPF program's 512-byte stack), and :class:`SensorWatch`
decides exactly, in user space:

- any access under the **protected roots** (the topology's checkpoint, weight and dataset
  roots, ``/dev/infiniband/uverbs``): the who-read-my-weights events;
- any access to a **secret** (``/etc/shadow``...: the sensitive-files policy's ``Equal``);
- a write (an open asking ``O_WRONLY``, ``O_RDWR``, ``O_CREAT`` or ``O_TRUNC``) under a
  **sensitive write prefix** (its ``Prefix`` with ``Mask`` 2);
- a TCP connect whose destination is outside the **cluster CIDRs** (the network policy's
  ``NotDAddr``: SC-3's ``cluster_cidrs``), of a **shell or netcat-like tool** (its
  ``matchBinaries``, loopback included: SC-8), of a binary under a **temp directory** (SC-2's
  exec-then-connect), or of a job process (W-2, SC-6);
- unlinks under the protected roots (DP-6).

The lists are the policies' own values (:data:`DEFAULT_SECRET_PATHS`...; a test keeps them
equal to the shipped policy files) and what the site's rules (``deploy/rules/
security-events.yaml``) add; the cluster CIDRs are the rules' (SC-3).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hpcscope.model.alerts import RuleSpec

#: The sensitive-files policy's ``Equal`` values: any access is posted.
DEFAULT_SECRET_PATHS: tuple[str, ...] = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/munge/munge.key",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
)
#: The sensitive-files policy's ``Prefix`` values (with ``Mask`` 2): writes are posted.
DEFAULT_WRITE_PREFIXES: tuple[str, ...] = (
    "/etc/passwd",
    "/etc/shadow",
    "/etc/group",
    "/etc/gshadow",
    "/etc/sudoers",
    "/etc/ld.so.preload",
    "/etc/pam.d/",
    "/etc/cron",
    "/etc/systemd/system/",
    "/etc/ssh/",
    "/etc/munge/",
    "/etc/slurm/",
    "/root/.ssh/",
    "/var/spool/cron/",
    "/usr/bin/",
    "/usr/sbin/",
    "/usr/local/bin/",
    "/usr/local/sbin/",
)
#: The network policy's ``NotDAddr`` values (SC-3's ``cluster_cidrs`` when the rules name it).
DEFAULT_CLUSTER_CIDRS: tuple[str, ...] = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "127.0.0.0/8",
)
#: The network policy's ``matchBinaries`` ``Postfix`` values, without their ``/``.
DEFAULT_SHELL_TOOLS: tuple[str, ...] = (
    "sh",
    "bash",
    "dash",
    "zsh",
    "nc",
    "ncat",
    "netcat",
    "nc.openbsd",
    "nc.traditional",
    "socat",
    "telnet",
)
DEFAULT_TEMP_PREFIXES: tuple[str, ...] = ("/tmp/", "/var/tmp/", "/dev/shm/")
#: open(2) flags that ask to write: O_WRONLY, O_RDWR, O_CREAT, O_TRUNC (the program's 0x243).
WRITE_FLAGS = 0o1 | 0o2 | 0o100 | 0o1000

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _under(path: str, prefixes: Sequence[str]) -> bool:
    return any(path.startswith(prefix) for prefix in prefixes)


@dataclass(frozen=True)
class SensorWatch:
    """The sensor's selectors (see the module docstring).

    Attributes:
        protected: roots whose every access is posted (the topology's, ``--protect``).
        secret_paths: files whose every access is posted.
        write_prefixes: path prefixes whose writes are posted.
        cluster_cidrs: where a connect is inside the site (not posted unless another reason).
        shell_tools: binary names whose every TCP connect is posted.
        temp_prefixes: directories whose binaries' connects are posted.
        unlinked: roots whose unlinks are posted (the protected roots by default).
    """

    protected: tuple[str, ...] = ()
    secret_paths: tuple[str, ...] = DEFAULT_SECRET_PATHS
    write_prefixes: tuple[str, ...] = DEFAULT_WRITE_PREFIXES
    cluster_cidrs: tuple[str, ...] = DEFAULT_CLUSTER_CIDRS
    shell_tools: tuple[str, ...] = DEFAULT_SHELL_TOOLS
    temp_prefixes: tuple[str, ...] = DEFAULT_TEMP_PREFIXES
    unlinked: tuple[str, ...] | None = None
    _networks: tuple[_Network, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        networks: list[_Network] = []
        for cidr in self.cluster_cidrs:
            try:
                networks.append(ipaddress.ip_network(cidr, strict=False))
            except ValueError:
                raise ValueError(f"cluster CIDR {cidr!r} does not parse") from None
        object.__setattr__(self, "_networks", tuple(networks))

    @classmethod
    def from_rules(cls, rules: Mapping[str, RuleSpec], *, protected: Sequence[str]) -> SensorWatch:
        """The site's lists where its rules name them, added to the policies' own (posting
        more than a rule reads costs a line; posting less loses an alert): CE-4
        ``secret_paths``, ``sensitive_write_prefixes`` and ``host_only_prefixes``, SC-8
        ``reverse_shell_tools``, SC-2 ``temp_prefixes``; SC-3's ``cluster_cidrs`` replace
        the policy's (a site that counts loopback as outside posts loopback connects)."""

        def items(rule_id: str, name: str) -> tuple[str, ...]:
            spec = rules.get(rule_id)
            return spec.items(name) if spec is not None and spec.enabled else ()

        def union(rule_id: str, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys([*default, *items(rule_id, name)]))

        return cls(
            protected=tuple(protected),
            secret_paths=union("CE-4", "secret_paths", DEFAULT_SECRET_PATHS),
            write_prefixes=union(
                "CE-4",
                "sensitive_write_prefixes",
                (*DEFAULT_WRITE_PREFIXES, *items("CE-4", "host_only_prefixes")),
            ),
            cluster_cidrs=items("SC-3", "cluster_cidrs") or DEFAULT_CLUSTER_CIDRS,
            shell_tools=union("SC-8", "reverse_shell_tools", DEFAULT_SHELL_TOOLS),
            temp_prefixes=union("SC-2", "temp_prefixes", DEFAULT_TEMP_PREFIXES),
        )

    # ------------------------------------------------------------------ the kernel's side

    def kernel_any_access(self) -> list[str]:
        """Prefixes the program reports every open of: the protected roots and the secrets
        (files of one directory sharing a name prefix merged: ``/etc/ssh/ssh_host_``)."""
        return [*self.protected, *_merged(self.secret_paths)]

    def kernel_written(self) -> list[str]:
        """Prefixes the program reports write opens of: four or more under one top
        directory become that directory (``/etc/``, ``/usr/``), one probe each otherwise."""
        return _coarse(self.write_prefixes)

    def kernel_unlinked(self) -> list[str]:
        return list(self.protected if self.unlinked is None else self.unlinked)

    # ------------------------------------------------------------------ the exact selectors

    def open_policy(self, path: str, flags: int) -> str | None:
        """The policy that posts an open of ``path`` (None: not posted)."""
        if _under(path, self.protected):
            return "weights"
        if path in self.secret_paths:
            return "sensitive"
        if flags & WRITE_FLAGS and _under(path, self.write_prefixes):
            return "sensitive"
        return None

    def outside(self, address: str) -> bool:
        """A destination outside every cluster CIDR (an address that does not parse is)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return not any(ip.version == net.version and ip in net for net in self._networks)

    def posts_connect(self, address: str, binary: str, *, in_job: bool) -> bool:
        """The network policy's selectors, and the job processes' connects."""
        name = os.path.basename(binary)
        return (
            in_job
            or self.outside(address)
            or name in self.shell_tools
            or _under(binary, self.temp_prefixes)
        )


def _merged(paths: Sequence[str]) -> list[str]:
    """Files of one directory whose names share a prefix of 4 or more characters -> that
    prefix; the rest as they are."""
    by_directory: dict[str, list[str]] = {}
    for path in sorted(set(paths)):
        by_directory.setdefault(os.path.dirname(path) + "/", []).append(path)
    merged: list[str] = []
    for directory, files in by_directory.items():
        common = os.path.commonprefix(files) if len(files) > 1 else ""  # noqa: RUF071 (names)
        if len(common) >= len(directory) + 4:
            merged.append(common)
        else:
            merged.extend(files)
    return merged


def _coarse(prefixes: Sequence[str]) -> list[str]:
    kept: list[str] = []
    for prefix in sorted(set(prefixes), key=len):  # without those a shorter one covers
        if not any(prefix.startswith(shorter) for shorter in kept):
            kept.append(prefix)
    by_top: dict[str, list[str]] = {}
    for prefix in sorted(kept):
        top = "/" + prefix.lstrip("/").split("/", 1)[0] + "/"
        by_top.setdefault(top, []).append(prefix)
    coarse: list[str] = []
    for top, members in by_top.items():
        coarse.extend([top] if len(members) >= 4 else members)
    return coarse
