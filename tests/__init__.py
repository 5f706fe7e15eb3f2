"""The test suite.

Compiled modules are cached (``__pycache__``, ignored by git) even where the environment sets
``PYTHONDONTWRITEBYTECODE`` (container images do): without the cache every pytest process
compiles the sources and rewrites the asserts of ~300 test modules again (collection 10.8 s
instead of 4.5 s on 2 cores), and so does every ``python -m hpcscope`` a test starts. The
installed packages keep their own caches: a cache outside the checkout
(``PYTHONPYCACHEPREFIX``) would compile torch and the rest again on a machine's first run.
Set here, the package's first lines, before the conftest imports the sources; the tests'
subprocesses inherit it through the environment.
"""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
