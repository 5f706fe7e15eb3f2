"""The test suite.

Compiled modules are cached even where the environment sets ``PYTHONDONTWRITEBYTECODE``
(container images do): without the cache every pytest process compiles the sources and
rewrites the asserts of ~300 test modules again (collection 10.8 s instead of 4.5 s on 2 cores),
and so does every ``python -m hpcscope`` a test starts. The cache lives outside the checkout
(:data:`PYCACHE`, keyed by each file's absolute path: worktrees do not collide), so no
``__pycache__`` appears beside the sources. Set here, the package's first lines, before the
conftest imports the sources; the tests' subprocesses inherit it through the environment.
"""

import os
import sys
import tempfile
from pathlib import Path

PYCACHE = Path(tempfile.gettempdir()) / "hpcscope-pycache"

sys.pycache_prefix = str(PYCACHE)
sys.dont_write_bytecode = False
os.environ["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
