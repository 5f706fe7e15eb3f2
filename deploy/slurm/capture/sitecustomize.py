"""hpcscope trace capture, switched on by the site for Slurm jobs (no change to scripts).

The TaskProlog (deploy/slurm/prolog, `capture_dir=` set) prepends this directory to
PYTHONPATH and exports HPCSCOPE_CAPTURE=1; Python imports `sitecustomize` at start-up, so every
Python process of the job runs this file. It only registers an import hook: the capture starts
when the process imports torch and steps an optimizer (hpcscope.capture, docs/capture.md).
`HPCSCOPE_CAPTURE_PATH` (from `capture_python_path=`) is where hpcscope is installed when the
job's own environment lacks it; it is appended to sys.path, so the job's packages still win.
Then the next `sitecustomize` on the path (the job's own, if any) runs as it would have.
Nothing here may fail the job: errors go to stderr in one line.
"""

import os
import sys


def _capture():
    if os.environ.get("HPCSCOPE_CAPTURE", "").strip().lower() not in ("1", "true", "yes"):
        return
    extra = os.environ.get("HPCSCOPE_CAPTURE_PATH", "")
    for entry in extra.split(os.pathsep):
        if entry and entry not in sys.path:
            sys.path.append(entry)
    try:
        import hpcscope.capture

        hpcscope.capture.install_from_env()
    except Exception as exc:
        sys.stderr.write(f"hpcscope capture: off: {exc!r}\n")


def _chain():
    """Run the sitecustomize this one shadows (the first other one on sys.path)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


try:
    _capture()
except BaseException as exc:  # never fail the job's interpreter start-up
    sys.stderr.write(f"hpcscope capture: off: {exc!r}\n")
try:
    _chain()
except Exception as exc:
    sys.stderr.write(f"hpcscope capture: the job's own sitecustomize failed: {exc!r}\n")
