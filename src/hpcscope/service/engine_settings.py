"""The settings of the metrics backend: which engine answers GPU-sample reads, and how to reach it.

A mixin of :class:`hpcscope.service.settings.Settings` (flat keys, ``prometheus_*``): a site on
its own Prometheus, VictoriaMetrics, Thanos or Mimir sets ``metrics_backend: prometheus`` and
``prometheus_url``, and whatever its engine's front door asks for (a bearer token, a user and
password, a client certificate, a tenant). Documented in ``docs/settings.md`` and
``docs/storage.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator

RuleUse = Literal["auto", "always", "never"]
"""``prometheus_recording_rules``: read the shipped recording rules when the engine has them
(``auto``), always (a missing rule is an error), or never (raw ``query_range`` only)."""


class EngineSettings(BaseModel):
    """Flat ``metrics_backend`` and ``prometheus_*`` keys (see the module docstring)."""

    metrics_backend: Literal["embedded", "prometheus"] = Field(
        "embedded",
        description="Who answers every GPU-sample read (job list and report, diagram, charts, "
        "chargeback, SLOs, job notes, telemetry rules): embedded (this server's own collector "
        "and store) or prometheus (the Prometheus HTTP API at prometheus_url: Prometheus, "
        "VictoriaMetrics, Thanos, Mimir; no dcgm-exporter is then scraped here).",
    )
    prometheus_url: str | None = Field(
        None,
        description="Base URL of the Prometheus HTTP API the prometheus backend reads "
        "(http://prom:9090; VictoriaMetrics http://vm:8428, a cluster's "
        "http://vmselect:8481/select/<tenant>/prometheus; Mimir http://mimir/prometheus).",
    )
    prometheus_lookback_seconds: float = Field(
        7 * 86400.0, gt=0, description="How far back the prometheus backend reads a job's samples."
    )
    prometheus_timeout_seconds: float = Field(
        30.0, gt=0, description="Per-request timeout of the prometheus backend."
    )
    prometheus_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="Retries of a request the engine did not answer (connection refused, "
        "timeout, HTTP 429/502/503/504), with exponential backoff; a refused query (HTTP 400, "
        "422) is not retried.",
    )
    prometheus_retry_backoff_seconds: float = Field(
        0.5, ge=0, description="First backoff of a retry (doubled per retry, at most 10 s)."
    )
    prometheus_max_series: int = Field(
        50_000,
        ge=1,
        description="Most series one answer may hold; a larger answer is refused with the "
        "query named (a selector that matches more than the pages need).",
    )
    prometheus_max_points: int = Field(
        2_000_000,
        ge=1_000,
        description="Most points one query_range answer may hold: a longer window is read in "
        "chunks, and a read that still needs more is refused with the query named.",
    )
    prometheus_recording_rules: RuleUse = Field(
        "auto",
        description="Read the engine recording rules (docs/storage.md) "
        "(auto: when the engine has them, else raw query_range; always; never).",
    )
    prometheus_rule_interval_seconds: int = Field(
        60,
        ge=1,
        description="Evaluation interval (and window) of the engine recording rules as loaded: "
        "60 for the shipped file (names end in 1m).",
    )
    prometheus_rule_delay_seconds: int | None = Field(
        None,
        ge=0,
        description="How far behind its evaluation each engine recording rule's window ends, "
        "as loaded (the rules' offset, --delay of hpcscope deploy prometheus-rules); unset: "
        "one scrape interval (scrape_interval_seconds, rounded up), as --delay defaults to.",
    )
    prometheus_bearer_token_file: Path | None = Field(
        None,
        description="File holding a bearer token sent as Authorization: Bearer (re-read when "
        "it changes).",
    )
    prometheus_basic_user: str | None = Field(
        None, description="User name of HTTP basic authentication to the engine."
    )
    prometheus_basic_password_file: Path | None = Field(
        None, description="File holding the password of prometheus_basic_user."
    )
    prometheus_client_certfile: Path | None = Field(
        None, description="PEM client certificate presented to the engine (mutual TLS)."
    )
    prometheus_client_keyfile: Path | None = Field(
        None, description="PEM key of prometheus_client_certfile."
    )
    prometheus_ca_file: Path | None = Field(
        None, description="PEM CA bundle the engine's certificate is verified with."
    )
    prometheus_tenant: str | None = Field(
        None,
        description="Tenant sent as X-Scope-OrgID (Mimir, Cortex, Thanos receive; "
        "VictoriaMetrics clusters name theirs in the URL).",
    )

    @model_validator(mode="after")
    def _engine_consistent(self) -> EngineSettings:
        if self.metrics_backend == "prometheus" and not self.prometheus_url:
            raise ValueError("metrics_backend prometheus needs prometheus_url")
        if (self.prometheus_basic_user is None) != (self.prometheus_basic_password_file is None):
            raise ValueError("prometheus_basic_user and prometheus_basic_password_file go together")
        if self.prometheus_basic_user is not None and self.prometheus_bearer_token_file:
            raise ValueError("choose one of prometheus_basic_user and prometheus_bearer_token_file")
        if (self.prometheus_client_certfile is None) != (self.prometheus_client_keyfile is None):
            raise ValueError("prometheus_client_certfile and prometheus_client_keyfile go together")
        return self
