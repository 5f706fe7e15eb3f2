"""hpcscope's exceptions: one tree rooted at :class:`HpcscopeError`.

Every error hpcscope raises on purpose derives from :class:`HpcscopeError`, so the CLI and the
web app can catch one type, map it to an exit code or an HTTP status, and print one clear line.
Bad input is a :class:`SourceError`: the source (a file path, a scrape target URL, a command),
and where known the line and column (1-based) and the field. Messages are written for the
operator who has to fix the input, not for us. Where callers already caught a built-in type
(``ValueError``, ``KeyError``, ``RuntimeError``), the class also derives from it.

Hierarchy (``tests/model/test_errors.py`` checks that every exception class under
``src/hpcscope`` derives from the root and is listed here)::

    HpcscopeError
     ├── SourceError                 (bad input: source, line, column, field; a ValueError)
     │    ├── ConfigError            (settings, users and site files)
     │    │    ├── TopologyError     (topology YAML: file, line, field)
     │    │    └── SensorConfigError (a prefix the sensor's program cannot match)
     │    ├── ExpositionError        (Prometheus text pages)
     │    ├── TargetsError           (file_sd target lists)
     │    ├── SchedulerFormatError   (Slurm JSON and text output)
     │    ├── JobMapError            (dcgm-exporter job-mapping files)
     │    ├── InfinibandFormatError  (IB sysfs counters, perfquery)
     │    ├── JobStatsFormatError    (Lustre job_stats)
     │    ├── ChangelogFormatError   (Lustre changelog records, lfs changelog)
     │    ├── ComputeAppsFormatError (nvidia-smi --query-compute-apps output)
     │    ├── NcclLogError           (NCCL and watchdog logs)
     │    ├── FlightRecorderError    (flight-recorder dumps)
     │    ├── UnsafePickleError      (a pickle that would run code)
     │    ├── TraceError             (Kineto traces)
     │    ├── SecurityEventError     (Falco and Tetragon JSON lines)
     │    ├── IntegrityRecordError   (gradient-integrity spool records)
     │    ├── CaptureMetaError       (trace-capture meta files)
     │    ├── RuleFileError          (detection rule files, deploy/rules)
     │    ├── NotifyRuleError        (notification rule files, deploy/notify)
     │    ├── NcclTableError         (the bundled NCCL latency table)
     │    ├── PromqlResponseError    (Prometheus HTTP API answers: query_range JSON)
     │    ├── ClassFileError         (kernel and operator class tables, deploy/kernels)
     │    ├── NodeFactError          (Xid counts and node posture series of the exporters)
     │    ├── TrainingEventError     (training-process records: torch.load, shard losses)
     │    └── BoundExceeded          (an input past a reader's bounds: objects, depth, cycle, size)
     ├── HostlistError               (a Slurm hostlist expression; a ValueError)
     ├── InputError                  (bad request parameters)
     │    ├── SimulationInputError   (simulator request; a ValueError)
     │    ├── SimulationParameterError (step model parameters; a ValueError)
     │    ├── CollectiveModelError   (collective cost model parameters; a ValueError)
     │    ├── UploadError            (malformed or oversized upload)
     │    ├── BodyRefused            (a request body not JSON, or nested past the bound)
     │    ├── AccessPathError        (who-read-my-weights path not absolute; a ValueError)
     │    ├── UnknownElement         (no diagram element with this id; a KeyError)
     │    ├── TokenRequestError      (an API token request: bad expiry or label; a ValueError)
     │    ├── PreferencesError       (notification preferences naming no rule; a ValueError)
     │    ├── ChargebackPeriodError  (a chargeback period that is not YYYY[-MM[-DD]]; a ValueError)
     │    └── QueryRefused           (a query string a kept answer does not take: the app answers)
     ├── AccessError                 (denied, or not visible to this principal)
     │    ├── LoginRequired          (a page needs a login: redirect)
     │    ├── Unauthorized           (an API call needs credentials: 401)
     │    ├── LoginThrottled         (too many failed logins: 429 with Retry-After)
     │    ├── AlertStateDenied       (an alert seen but not one's own to acknowledge: 403)
     │    ├── TraceAccessError       (a trace action or job the principal may not touch)
     │    ├── TokenGrantDenied       (an API token above one's role, or somebody else's: 403)
     │    ├── ReadOnlyPrincipal      (a change by a read-only token or an auditor: 403)
     │    └── AuditDenied            (the notification audit log is for admins: 403)
     ├── SensorUnavailable           (no bpftrace, not root, no tracefs; a RuntimeError)
     ├── StoreError                  (store open, migration, corruption; a RuntimeError)
     │    └── StoreClosedError       (a write after close)
     ├── ScrapeError                 (a scrape that ended without a usable page)
     │    ├── HttpFailure            (the HTTP/1.1 scrape client's failures, with the message)
     │    └── _Failed                (the scraper's internal signal, recorded, never escapes)
     ├── DeliveryError               (a notification not delivered: SMTP, webhook, Alertmanager)
     ├── CancelFailed                (scancel did not cancel a job)
     ├── MetricsBackendError         (a Prometheus API backend that did not answer; a RuntimeError)
     ├── EngineNotStarted            (the demo's Prometheus not installed or not started)
     └── SnapshotMiss                (a cached read that would compute on the event loop: internal)
"""

from __future__ import annotations


class HpcscopeError(Exception):
    """The root of every exception hpcscope raises on purpose."""


class SourceError(HpcscopeError, ValueError):
    """Bad input, with its source and position."""

    def __init__(
        self,
        message: str,
        *,
        source: str,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        """Render as ``source:line:column: field: message`` with the parts that are known."""
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        prefix = f"{where}: "
        if self.field:
            prefix += f"{self.field}: "
        return prefix + self.message

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready view for ``--json`` output and API error bodies."""
        return {
            "message": self.message,
            "source": self.source,
            "line": self.line,
            "column": self.column,
            "field": self.field,
        }


class ConfigError(SourceError):
    """A settings, users or site file that cannot be used (file, line, field)."""


class TopologyError(ConfigError):
    """A topology file that cannot describe a cluster."""


class InputError(HpcscopeError):
    """Bad request parameters (API query, CLI option, form field, upload)."""


class AccessError(HpcscopeError):
    """The principal may not do this, or may not see this object."""


class StoreError(HpcscopeError, RuntimeError):
    """The store could not be opened or migrated, is corrupt, or refused a write."""


class ScrapeError(HpcscopeError):
    """A scrape that ended without a usable page; the message is the operator's error."""
