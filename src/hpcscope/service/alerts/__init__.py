"""Alerts as a capability: rule files, and reading and changing stored alerts for a principal."""
