"""Pure domain: cluster topology, element catalog, table schemas, units, jobs.

Imports nothing of ours. Everything else in hpcscope speaks in these types.
"""
