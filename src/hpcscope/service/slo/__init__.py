"""Service-level objectives: settings, scoped reports, and burn-rate alerts into the engine.

``config`` reads the objectives and the window from the settings; ``report`` builds the
``/slo`` page's and ``hpcscope slo``'s document for one principal; ``engine`` evaluates the
workbook's multiwindow burn-rate pairs cluster-wide after collector cycles and writes alerts,
and gives ``/metrics`` its cumulative good/total counters (``docs/slo.md``).
"""
