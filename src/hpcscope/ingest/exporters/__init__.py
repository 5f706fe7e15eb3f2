"""Exporters' pages and files -> Arrow: dcgm-exporter, node_exporter InfiniBand, Lustre
job_stats."""
