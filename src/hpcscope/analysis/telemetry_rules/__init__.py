"""Detection rules over telemetry hpcscope already collects (not syscall events).

InfiniBand port counters (RD-1, RD-2, RD-2b, RD-3, RD-5, RD-6, RD-7), DCGM samples with the
job mapping and NVML process lists (SC-4, GM-1, GM-2), Lustre changelog records and
``job_stats`` (DP-1, DP-2, DP-4). Pure functions: the service reads the store, passes frames
and the rules of ``deploy/rules/security-telemetry.yaml``, and stores the alerts they return.
"""
