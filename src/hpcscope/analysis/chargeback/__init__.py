"""Chargeback and waste (issue 14 part 3): allocated and useful GPU-hours of kept job
summaries, waste attributed to exactly one cause per GPU-second, split by period, grouped by
account, user or partition, priced per GPU model. Pure functions (``docs/chargeback.md``)."""
