"""The canary: a profile judged on the live host it is meant for (docs/canary.md)."""

# --margin's default: the smallest margin at which a gain whose secondary metric is neutral is kept
# in at least 95% of 150-pair streams resampled from the lab pool (benchmarks/canary_calibration.py,
# benchmarks/RESULTS.md "Canary"); 10% kept 80% of them. The pool's noise is TCG's, louder than a
# real host's: on a quiet host a tighter margin keeps as well and rolls a loss back sooner.
DEFAULT_MARGIN = 0.15
