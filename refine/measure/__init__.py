"""measure: a workload's ladder (arms x background levels x repeats), its ladder file and the judge.

Imports nothing from `threadwise.refine.search` or the modules above it (tests/test_boundaries.py).
"""
