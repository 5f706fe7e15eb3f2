"""hpcscope: observability and security for HPC clusters that train AI models.

Which job, which GPU, which phase, and what it costs. See the README for the two commands
(``make demo``, ``make test``) and ``docs/`` for the architecture.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
