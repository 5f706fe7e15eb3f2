"""Training-step anatomy from per-rank traces: phases, barrier wait, stragglers and their
evidence."""
