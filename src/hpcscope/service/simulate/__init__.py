"""The straggler simulator and step player wired to a cluster topology."""
