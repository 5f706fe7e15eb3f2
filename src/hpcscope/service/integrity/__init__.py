"""Gradient integrity: read the hook's spool, attribute, evaluate GI rules, raise alerts."""
