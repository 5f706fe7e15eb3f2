"""The explorable cluster diagram: live values, element cards, collector health, cost reading."""
