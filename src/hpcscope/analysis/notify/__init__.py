"""Job notes and notification rules: pure functions over a job's facts (no I/O, no clock)."""
