"""search: the mutation search over profiles, deciding from the verdicts `measure` stored.

Imports `threadwise.refine.measure`, never the record or the CLI above it (tests/test_boundaries.py).
"""
