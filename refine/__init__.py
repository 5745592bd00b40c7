"""refine: workload drivers and (later) the background-load ladder."""
