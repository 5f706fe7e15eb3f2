"""Gradient-integrity records written by the opt-in DDP hook (:mod:`hpcscope.integrity`)."""
