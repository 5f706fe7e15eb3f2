"""Security sources: Falco JSON alerts and Tetragon JSON export, attributed to Slurm jobs.

Each parser turns JSON lines into one Arrow table (schemas in
:mod:`hpcscope.model.security_events`) and never stops on a bad line: a line that cannot be
read becomes a :class:`~hpcscope.ingest.security.lines.SecurityEventError` (source, line,
column) collected beside the good rows.
"""
