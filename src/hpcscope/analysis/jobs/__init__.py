"""Per-job accounting from GPU samples and scheduler records: efficiency, reports, queue waits."""
