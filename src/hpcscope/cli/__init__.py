"""Command line: parse args -> call the service or the HTTP API -> render a table or JSON.

Results go to stdout, logs and progress to stderr; ``--json`` on every command prints a stable,
documented schema; exit 0 success, 1 runtime error, 2 usage error.
"""
