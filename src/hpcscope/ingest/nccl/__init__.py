"""NCCL logs, PyTorch watchdog lines, nccl-tests output and flight-recorder dumps -> typed
records."""
