"""Site settings: one pydantic model, from a YAML/JSON file, environment or flags.

Environment variables use the ``HPCSCOPE_`` prefix (``HPCSCOPE_STORE_PATH``...); a key of a
source's section is ``HPCSCOPE_<SECTION>__<KEY>`` (``HPCSCOPE_SLURM__URL``). The sources'
sections are :mod:`hpcscope.service.source_settings` (documented in the generated
``docs/sources.md``); every other setting is documented in ``docs/settings.md``; tests keep
both in step. The flat keys of earlier versions are still read (``LEGACY_KEYS``).
"""

from __future__ import annotations

import ipaddress
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from hpcscope.model import bounded_yaml
from hpcscope.model.errors import ConfigError
from hpcscope.service.engine_settings import EngineSettings
from hpcscope.service.source_settings import (
    LEGACY_KEYS,
    SourceSections,
    legacy_replacement,
    nest_legacy_keys,
)
from hpcscope.store.connection import DEFAULT_CHECKPOINT_THRESHOLD_BYTES, StoreLimits

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]

#: Production scrypt cost of password hashes: n = 2**14 (~40 ms a hash on one core).
DEFAULT_PASSWORD_HASH_COST_LOG2 = 14


def bundled_topology(name: str = "2x8-h100") -> Path:
    """Path of a topology shipped with hpcscope (``2x8-h100``, ``128x8-h100``)."""
    candidates = [
        Path(__file__).resolve().parents[1] / "topologies" / f"{name}.yaml",  # wheel
        REPO_ROOT / "topologies" / f"{name}.yaml",  # source checkout
    ]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"no bundled topology named {name!r}")


class Settings(EngineSettings, SourceSections):
    """Everything a site configures. Defaults suit a single-machine install.

    The sources' sections (``dcgm``, ``slurm``, ``lustre_job_stats``...) come from
    :class:`~hpcscope.service.source_settings.SourceSections`; the flat keys earlier versions
    used for them are moved into their sections on the way in.
    """

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _legacy_keys(cls, data: object) -> object:
        if isinstance(data, Mapping):
            nested, _ = nest_legacy_keys(data)
            return nested
        return data

    store_path: Path = Field(
        Path("var/hpcscope.duckdb"), description="DuckDB file owned by the server process."
    )
    store_memory_limit_bytes: int | None = Field(
        None,
        gt=0,
        description="Most bytes DuckDB holds in memory for the store (its memory_limit: "
        "blocks read or written, rows not yet checkpointed, queries' intermediates); at it "
        "DuckDB evicts blocks and spills to <store>.tmp. Default: DuckDB's, 80 % of RAM.",
    )
    store_checkpoint_threshold_bytes: int = Field(
        DEFAULT_CHECKPOINT_THRESHOLD_BYTES,
        gt=0,
        description="Write-ahead log bytes at which DuckDB checkpoints: the rows appended in "
        "memory between two checkpoints (docs/storage.md).",
    )
    topology_path: Path | None = Field(
        None, description="Cluster topology YAML; default: the bundled 2x8-h100."
    )
    users_path: Path | None = Field(
        None, description="Users file (YAML): name, role, password hash, coordinated accounts."
    )
    host: str = Field("127.0.0.1", description="Address the web server listens on.")
    port: int = Field(8080, ge=0, le=65535, description="Port the web server listens on.")
    secret_key: str | None = Field(
        None,
        description="Key that signs session cookies; "
        "random per start when unset (sessions end on restart).",
    )
    password_hash_cost_log2: int = Field(
        DEFAULT_PASSWORD_HASH_COST_LOG2,
        ge=1,
        le=20,
        description="scrypt cost of the password hashes the server makes: n = 2**value "
        "(the demo users' and the dummy hash of unknown names).",
    )
    anonymous_diagram: bool = Field(
        False,
        description="Let anonymous visitors see the "
        "cluster diagram: structure, cards, collectors, threats, "
        "aggregate health, never job or user names.",
    )
    scrape_interval_seconds: float = Field(15.0, gt=0, description="Seconds between scrapes.")
    scrape_timeout_seconds: float = Field(5.0, gt=0, description="Per-target scrape timeout.")
    snapshot_min_refresh_seconds: float = Field(
        5.0,
        ge=0,
        description="Once the collector publishes its cycles, the least time between two "
        "computations of one live read view (the pages poll every 5 to 7 s).",
    )
    worker_threads: int = Field(
        8,
        ge=1,
        le=256,
        description="Most threads the web server computes requests in (the reads its kept "
        "views cannot answer on the event loop, uploads, writes): the work holds the "
        "interpreter lock, so more threads than this only queue for it, each with its stack "
        "and heap arena.",
    )
    rollup_grace_seconds: float = Field(
        120.0,
        ge=0,
        description="Seconds after its end a minute of rollups stays open to late samples; "
        "then it is final (docs/storage.md).",
    )
    raw_retention_days: float = Field(
        14.0,
        gt=0,
        description="Days raw GPU samples of summarised jobs are kept; older ones are dropped "
        "by the retention pass (samples of jobs without a summary are kept).",
    )
    rollup_retention_days: float = Field(
        400.0,
        gt=0,
        description="Days final 1-minute rollups are kept. Job summaries are kept forever.",
    )
    upkeep_every_cycles: int = Field(
        60,
        ge=1,
        description="The collector summarises finished jobs and runs the retention pass on its "
        "first cycle and then once per this many cycles.",
    )
    telemetry_rules_every_seconds: float = Field(
        15.0,
        ge=0,
        description="The collector evaluates the telemetry rules (RD-, SC-4, GM-, DP-) after a "
        "cycle when this long has passed since their last run (0: every cycle).",
    )

    tls_certfile: Path | None = Field(
        None, description="PEM certificate chain: serve HTTPS (needs tls_keyfile)."
    )
    tls_keyfile: Path | None = Field(None, description="PEM private key of tls_certfile.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or CIDR networks of reverse proxies whose X-Forwarded-Proto "
        "and X-Forwarded-For are believed; nobody's when empty.",
    )
    trusted_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) besides the server's own that may send "
        "state-changing requests: the public URL behind a proxy.",
    )
    login_failures_per_minute: int = Field(
        10,
        ge=1,
        description="Failed logins per user name and per client address in a minute before "
        "further tries get 429 (the lockout doubles on each repeat, up to an hour).",
    )
    api_token_max_days: float = Field(
        365.0,
        gt=0,
        description="Longest lifetime of an API token, days (each token's own expiry is set "
        "when it is created, 90 days unless asked otherwise).",
    )
    proxy_auth_header: str | None = Field(
        None,
        description="Request header naming the authenticated user (X-Remote-User, "
        "X-Forwarded-User) set by an SSO/OIDC reverse proxy; believed only from "
        "proxy_auth_addresses, a 401 from anybody else. Off when unset.",
    )
    proxy_auth_addresses: list[str] = Field(
        default_factory=list,
        description="Addresses or CIDR networks of the reverse proxies allowed to send "
        "proxy_auth_header (the proxy's own address, as this server sees the connection).",
    )
    upload_max_bytes: int = Field(
        4 << 30, ge=1, description="Largest upload (all files of one request), bytes."
    )
    upload_max_members: int = Field(
        4096, ge=1, description="Most files in one upload, tar archive members included."
    )
    upload_max_expansion_ratio: float = Field(
        200.0,
        gt=1,
        description="Most a gzip part of an upload may expand (decompressed / compressed "
        "bytes), checked while it arrives.",
    )

    @field_validator("trusted_proxies", "trusted_origins", "proxy_auth_addresses", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        # HPCSCOPE_TRUSTED_ORIGINS=https://a,https://b from the environment
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("trusted_proxies", "proxy_auth_addresses")
    @classmethod
    def _networks_parse(cls, value: list[str]) -> list[str]:
        for entry in value:
            ipaddress.ip_network(entry, strict=False)  # ValueError names the entry
        return value

    @field_validator("trusted_origins")
    @classmethod
    def _origins_parse(cls, value: list[str]) -> list[str]:
        cleaned = [entry.rstrip("/").lower() for entry in value]
        for entry in cleaned:
            scheme, sep, rest = entry.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(f"not an origin (scheme://host[:port]): {entry!r}")
        return cleaned

    @field_validator("proxy_auth_header")
    @classmethod
    def _header_name(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not all(ch.isalnum() or ch == "-" for ch in value):
            raise ValueError(f"not an HTTP header name: {value!r}")
        if value.lower() in ("authorization", "cookie", "host", "x-forwarded-for"):
            raise ValueError(f"{value!r} cannot carry the proxy's user name")
        return value

    @model_validator(mode="after")
    def _proxy_auth_pair(self) -> Settings:
        if self.proxy_auth_header is not None and not self.proxy_auth_addresses:
            raise ValueError(
                "proxy_auth_header needs proxy_auth_addresses: the proxies it is believed from"
            )
        return self

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together: set both or neither")
        return self

    rules_dir: Path | None = Field(
        None,
        description="Directory of detection rule files (*.yaml), validated at start; "
        "default: the bundled deploy/rules.",
    )
    notify_rules_path: Path | None = Field(
        None,
        description="Notification rules and job-note thresholds (YAML), validated at start; "
        "default: the bundled deploy/notify/notifications.yaml.",
    )
    smtp_host: str | None = Field(
        None, description="SMTP server notifications are e-mailed through; unset: no e-mail."
    )
    smtp_port: int = Field(25, ge=1, le=65535, description="Port of smtp_host.")
    smtp_from: str = Field(
        "hpcscope@localhost", description="From address of notification e-mails."
    )
    smtp_starttls: bool = Field(
        False, description="Upgrade the SMTP connection with STARTTLS before sending."
    )
    notify_email_domain: str | None = Field(
        None,
        description="Mail domain of the cluster's users: a job's owner is e-mailed at "
        "<user>@<domain>; unset: no e-mail.",
    )
    notify_webhook_url: str | None = Field(
        None,
        description="URL every notification is POSTed to as JSON (with a Slack/Mattermost "
        "'text' field); unset: no webhook.",
    )
    notify_public_url: str | None = Field(
        None, description="hpcscope's address as users reach it, for links in notifications."
    )
    notify_interval_seconds: float = Field(
        60.0,
        gt=0,
        description="Seconds between evaluations of the notification rules (run after a "
        "collector cycle once this many have passed).",
    )
    notify_repeat_hours: float = Field(
        24.0,
        gt=0,
        description="A rule notifies the owner of a job at most once per this many hours.",
    )
    notify_max_per_user_per_hour: int = Field(
        20,
        ge=1,
        description="Most notifications one user gets per channel in an hour; more are "
        "withheld and audited as rate_limited.",
    )
    notify_cancel_enabled: bool = Field(
        False,
        description="Warn-then-cancel: scancel a job whose idle-allocation rule (cancel: "
        "true) still holds notify_cancel_grace_seconds after its owner was warned.",
    )
    notify_cancel_grace_seconds: float = Field(
        1800.0, gt=0, description="Seconds between the warning and the cancel."
    )
    notify_cancel_via: Literal["scancel", "slurmrestd"] = Field(
        "scancel",
        description="How warn-then-cancel cancels: scancel on this server, or slurmrestd's "
        "DELETE /slurm/<version>/job/<id> (slurmrestd_url, its user and token).",
    )
    alertmanager_url: str | None = Field(
        None,
        description="Alertmanager base URL: open alerts are POSTed to its /api/v2/alerts and "
        "re-sent while open; unset: not sent.",
    )
    alertmanager_resend_seconds: float = Field(
        60.0,
        gt=0,
        description="Seconds between re-sends of an open alert to Alertmanager (its endsAt "
        "is four of these ahead, as Prometheus does).",
    )
    slo_window_days: float = Field(
        30.0,
        gt=0,
        description="Compliance window of the SLOs (days): SLIs, error budgets and their "
        "remaining part are computed over it (docs/slo.md).",
    )
    slo_queue_wait_seconds: float = Field(
        3600.0,
        gt=0,
        description="Longest queue wait (Slurm submit to start) of a good job for the "
        "queue-wait SLO; a job waiting longer is a bad event from then on.",
    )
    slo_queue_wait_objective_ratio: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="Objective of the queue-wait SLO: share of jobs that start within "
        "slo_queue_wait_seconds.",
    )
    slo_job_success_objective_ratio: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="Objective of the job-success SLO: share of ended jobs (cancelled ones "
        "not counted) that completed with exit code 0.",
    )
    slo_gpu_efficiency_objective_ratio: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Objective of the GPU-efficiency SLO: useful / allocated GPU-hours of "
        "summarised jobs.",
    )
    slo_evaluate_every_cycles: int = Field(
        4,
        ge=1,
        description="The collector evaluates the SLOs' burn-rate alerts into the alert engine "
        "on its first cycle and then once per this many cycles.",
    )
    chargeback_gpu_hour_rates: dict[str, float] = Field(
        default_factory=dict,
        description="Chargeback price of one GPU-hour per GPU model name (the topology's "
        "model, e.g. H100-SXM5-80GB); models not named cost the topology's gpu_hour_price. "
        "Environment: MODEL=RATE,MODEL=RATE.",
    )

    @field_validator("chargeback_gpu_hour_rates", mode="before")
    @classmethod
    def _rates_list(cls, value: object) -> object:
        # HPCSCOPE_CHARGEBACK_GPU_HOUR_RATES=H100-SXM5-80GB=2.5,A100-SXM4-80GB=1.6
        if isinstance(value, str):
            rates: dict[str, str] = {}
            for part in filter(None, (p.strip() for p in value.split(","))):
                model, sep, rate = part.rpartition("=")
                if not sep or not model.strip():
                    raise ValueError(f"not MODEL=RATE: {part!r}")
                rates[model.strip()] = rate.strip()
            return {k: float(v) for k, v in rates.items()}
        return value

    @field_validator("chargeback_gpu_hour_rates")
    @classmethod
    def _rates_positive(cls, value: dict[str, float]) -> dict[str, float]:
        for model, rate in value.items():
            if not rate >= 0:
                raise ValueError(f"rate of {model!r} must be >= 0, not {rate}")
        return value

    def store_limits(self) -> StoreLimits:
        """DuckDB's memory settings for the store (:mod:`hpcscope.store.connection`)."""
        return StoreLimits(self.store_memory_limit_bytes, self.store_checkpoint_threshold_bytes)

    def resolved_topology_path(self) -> Path:
        return self.topology_path or bundled_topology()


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from a file (optional), then ``HPCSCOPE_*`` environment, then ``overrides``.

    Raises:
        SourceError: unreadable file or an invalid setting, naming the file and the field.
    """
    # the file's YAML mapping, then the environment and the overrides, before pydantic checks
    values: dict[str, object] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
            loaded = bounded_yaml.safe_load(text, source=source) or {}
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read settings: {exc}", source=source) from None
        if not isinstance(loaded, dict):
            raise ConfigError("settings must be a mapping", source=source, line=1)
        _merge(values, _nested(loaded, source, warn=True))
    _merge(values, _nested(_environment(), "the environment", warn=True))
    _merge(values, _nested({k: v for k, v in overrides.items() if v is not None}, source))
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ConfigError(first["msg"], source=source, field=field) from None


def _environment() -> dict[str, object]:
    """``HPCSCOPE_<NAME>`` of every setting and old flat key, ``HPCSCOPE_<SECTION>__<KEY>``."""
    found: dict[str, object] = {}
    sections = set(SourceSections.model_fields)
    for name in [*Settings.model_fields, *LEGACY_KEYS]:
        if name in sections:
            continue
        env = os.environ.get(f"HPCSCOPE_{name.upper()}")
        if env is not None:
            found[name] = env
    for section, field in SourceSections.model_fields.items():
        model = field.annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for key in model.model_fields:
            env = os.environ.get(f"HPCSCOPE_{section.upper()}__{key.upper()}")
            if env is not None:
                found.setdefault(section, {})
                section_values = found[section]
                assert isinstance(section_values, dict)
                section_values[key] = env
    return found


def _nested(values: Mapping[str, object], source: str, *, warn: bool = False) -> dict[str, object]:
    """One layer of values (file, environment, flags) with its old flat keys in sections."""
    try:
        nested, legacy = nest_legacy_keys(values)
    except ValueError as exc:
        raise ConfigError(str(exc), source=source) from None
    if warn:
        for key in legacy:
            log.warning(
                "settings: %s: %s is an old key, read as %s (docs/settings.md)",
                source,
                key,
                legacy_replacement(key),
            )
    return nested


def _merge(values: dict[str, object], layer: Mapping[str, object]) -> None:
    """A later layer over ``values``: a section's keys one by one, other values whole."""
    sections = set(SourceSections.model_fields)
    for key, value in layer.items():
        current = values.get(key)
        if key in sections and isinstance(current, Mapping) and isinstance(value, Mapping):
            values[key] = {**current, **value}
        else:
            values[key] = value
