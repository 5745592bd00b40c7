"""Synthetic inputs shared by the tests and the benchmarks: bulk captures (bulk.py) and the libbpf
tracer's record files (records_gen.py), generated with numpy at any size."""
