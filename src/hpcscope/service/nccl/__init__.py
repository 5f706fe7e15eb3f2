"""NCCL logs and flight-recorder dumps: read, analyse, build the report."""
