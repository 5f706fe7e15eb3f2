"""``python -m hpcscope`` runs the command-line interface."""

from hpcscope.cli.main import main

main()
