"""Security wiring: Falco/Tetragon sources (file, pipe, HTTP), the event buffer the alert
engine drains, and the guardrails hpcscope ships (Tetragon TracingPolicies from the topology).
"""
