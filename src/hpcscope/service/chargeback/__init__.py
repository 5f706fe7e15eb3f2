"""Chargeback and waste per account, user and partition over a period (``docs/chargeback.md``):
scoped reads of kept job summaries, rates per GPU model from the settings, the documents the
API and the CLI emit, CSV export and the monthly report of an account."""
