"""Service-level objectives over the scheduler's and the summaries' records (issue 14).

Pure functions, no clock and no I/O: :mod:`~hpcscope.analysis.slo.budget` holds the SRE
workbook's arithmetic (SLI, error budget, its remaining part, burn rate per window, the
multiwindow multi-burn-rate condition), :mod:`~hpcscope.analysis.slo.events` turns job records
into good/total events, one row per job and SLO. ``docs/slo.md`` has the definitions.
"""
