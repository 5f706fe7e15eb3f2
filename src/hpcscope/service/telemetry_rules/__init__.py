"""The telemetry rules in the running service: read the store, evaluate, store the alerts."""
