"""Job reports and the live cluster state, constrained by the caller's principal."""
