"""Import and export: traces recorded elsewhere in, Perfetto traces of captures out.

- `export_perfetto`: a capture as a Perfetto protobuf trace (per-CPU ftrace
  bundles, compact_sched where it loses nothing); a profile's layers come in
  as data (`ThreadLayers`), placed by the caller.
- `import_trace`: a Perfetto trace or a `perf sched record` recording as a
  capture; the decoders (`import_perfetto`, `import_perf`) feed the import
  sink (`sink`), which writes the raw tables in bounded batches.
- `trace_io`: atomic outputs and Perfetto's packet framing; `cli`: the
  `export` and `import` commands.

The subpackage uses only observe's capture store and schema and the core
package: no later stage, so the pipeline's order holds (tests/test_boundaries.py).
"""
