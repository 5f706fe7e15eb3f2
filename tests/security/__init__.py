"""Acceptance suite for the service's own web edge, from outside over HTTP (issue 17)."""
