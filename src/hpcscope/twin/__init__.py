"""The digital twin: a simulated cluster that emits the real formats over the real interfaces.

dcgm-exporter ``/metrics`` pages on loopback, the hpc-job-mapping files the Slurm prolog writes,
scheduler records; so the pipeline that runs on the twin is the one that runs on a real cluster.
"""
