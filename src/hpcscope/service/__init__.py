"""Wiring: sources -> store -> analysis. The only place the layers meet (with serve and cli).

:class:`hpcscope.service.core.Service` owns the store, the topology, the user directory and the
collector, and offers the operations the web app and the CLI call. Access control is enforced
here, on the server, for every read: callers pass the authenticated principal.
"""
