"""What a Falco rule means to hpcscope: the table of ``deploy/rules/falco/meaning.yaml``.

Every rule of Falco's rulesets (falcosecurity/rules: stable, incubating, sandbox) is listed
with a threat vector and a severity floor, or as no vector of hpcscope's; the hpcscope rule
whose condition it is, when there is one; the facts of hpcscope's own that raise it to HIGH
(:data:`RAISES`) and the harmless cases it recognises (:data:`BENIGN`). A rule the table
does not list is raised at its priority (:attr:`FalcoMeaning.priorities`) in the vector its
MITRE tactic tag names, never dropped. The service reads the file
(:mod:`hpcscope.service.alerts.falco_meaning`); this module is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hpcscope.model.alerts import Severity, Vector

#: Facts that raise a Falco alert to HIGH, by the name the table uses.
RAISES: tuple[str, ...] = (
    "python_lineage_in_job",
    "in_job",
    "peer_outside_cluster",
    "sensitive_file",
    "under_dataset_root",
    "host_root_mount",
)

#: Harmless cases a table entry may name.
BENIGN: tuple[str, ...] = ("runtime_self_exec", "image_build")

#: Falco reports its own health under rules named so (drops, metrics): never a threat.
INTERNAL_PREFIX = "Falco internal:"


@dataclass(frozen=True, slots=True)
class FalcoRuleMeaning:
    """One Falco rule as hpcscope reads it.

    Attributes:
        falco: the Falco rule's name.
        vector: its threat vector; None: not a threat vector of hpcscope (counted only).
        severity: the severity floor.
        rule: the hpcscope rule id whose condition it is, or None (the vector's Falco rule).
        raises: facts (:data:`RAISES`) that raise it to HIGH.
        benign: harmless cases (:data:`BENIGN`) not raised.
        why: the reading, for a person.
    """

    falco: str
    vector: Vector | None
    severity: Severity
    rule: str | None = None
    raises: tuple[str, ...] = ()
    benign: tuple[str, ...] = ()
    why: str = ""


@dataclass(frozen=True, slots=True)
class FalcoMeaning:
    """The table (rules by name) and how an unlisted rule is read."""

    rules: Mapping[str, FalcoRuleMeaning] = field(default_factory=dict)
    priorities: Mapping[str, Severity] = field(
        default_factory=lambda: {
            "emergency": Severity.CRITICAL,
            "alert": Severity.CRITICAL,
            "critical": Severity.CRITICAL,
            "error": Severity.HIGH,
            "warning": Severity.MEDIUM,
            "notice": Severity.LOW,
            "informational": Severity.LOW,
            "debug": Severity.LOW,
        }
    )
    tactics: Mapping[str, Vector] = field(default_factory=dict)
    default_vector: Vector = Vector.SUPPLY_CHAIN

    def of(self, name: str, *, priority: str, tags: tuple[str, ...]) -> FalcoRuleMeaning | None:
        """The meaning of one alert's rule; an unlisted rule at its priority, in the vector
        its first MITRE tactic tag names; None for Falco's own health reports."""
        if name.startswith(INTERNAL_PREFIX):
            return None
        known = self.rules.get(name)
        if known is not None:
            return known
        vector = next((self.tactics[t] for t in tags if t in self.tactics), self.default_vector)
        severity = self.priorities.get(priority, Severity.MEDIUM)
        why = f"a Falco rule hpcscope does not list, raised at its priority ({priority})"
        return FalcoRuleMeaning(name, vector, severity, why=why)


def mount_items(mounts: str | None) -> list[tuple[str, str, bool]]:
    """``container.mounts`` (``source:dest:mode:rdwr:propagation`` joined by commas) as
    (source, destination, read-write) triples."""
    items: list[tuple[str, str, bool]] = []
    for item in (mounts or "").split(","):
        parts = item.split(":")
        if len(parts) >= 4:
            items.append((parts[0], parts[1], parts[3].strip().lower() == "true"))
    return items


#: Host paths whose read-write mount gives a container the host (its root, the runtimes).
HOST_MOUNT_SOURCES: tuple[str, ...] = (
    "/",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
    "/etc",
    "/root",
)

#: Image builders: a package manager under one of these is an image build.
IMAGE_BUILDERS: tuple[str, ...] = (
    "buildkitd", "buildkit-runc", "buildctl", "buildah", "kaniko", "executor", "img",
    "docker-build", "podman-build", "apptainer", "singularity", "enroot",
)  # fmt: skip

#: Container runtimes that re-execute themselves from a memfd (runc >= 1.1.15, crun).
RUNTIME_SELF_EXEC: tuple[str, ...] = ("runc", "crun", "runc:[0:PARENT]", "runc:[1:CHILD]")
