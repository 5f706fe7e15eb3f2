"""Alert rules over security events (Falco alerts, Tetragon events): pure evaluation."""
