"""The web app: HTML pages (Jinja2 + vendored htmx/uPlot) and their JSON twins, ``/metrics``.

Every route that returns job data depends on :func:`hpcscope.serve.auth.require_principal`
and passes the principal down to the service, which constrains the query. ``/healthz`` is the
only route without authentication.
"""
