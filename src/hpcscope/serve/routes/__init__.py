"""HTTP routes, one module per area; each HTML page has a JSON twin."""
