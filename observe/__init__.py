"""observe: eBPF capture of a workload's threads into DuckDB."""
