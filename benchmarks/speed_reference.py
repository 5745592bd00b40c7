"""Moved to research/2026-12-host-noise/speed_reference.py, with the host-noise study it belongs to
(research/2026-12-host-noise/FINDINGS.md).

This name stays only while docs/refine.md cites it ("Sample size and power"); delete it once that
citation names the research folder.
"""

raise SystemExit("benchmarks/speed_reference.py moved to research/2026-12-host-noise/speed_reference.py")
