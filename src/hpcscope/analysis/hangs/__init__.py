"""NCCL hangs and what NCCL's messages mean: localisation from watchdog lines and flight
recorders."""
