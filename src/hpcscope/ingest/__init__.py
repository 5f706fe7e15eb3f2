"""Ingest: external formats -> Arrow. Never touches the store.

Every parser reports bad input as a :class:`hpcscope.model.errors.SourceError` naming the
source and position, and keeps what it could read.
"""
