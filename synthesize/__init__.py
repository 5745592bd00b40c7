"""synthesize: profile schema, validation, compilation to scx_layered JSON, placement lint.

The stable entry points other stages use:
- `reader.load_profile(path) -> (Profile, SourceMap)`; `writer.dumps(profile) -> str`
- `rules.check_file(path) -> (Profile | None, [Diagnostic])`, `rules.validate(profile, ...)`
- `diagnostics.errors(found)`, `diagnostics.ProfileError(file, found)`
- `rules.load_valid(path) -> Profile` (ProfileError when invalid)
- `shape.parse_shape(spec) -> Shape`, `compile.compile_profile(profile, shape) -> Compiled`
  (`.config` the typed scx_layered config of `layered.py`, the only form it
  travels in after compile; `.to_json()` its text; `.notes` what was demoted)
- `oracle.check(LayerConfig) -> [mismatch]` (scx_layered `--print-and-exit`, via threadwise.scx)
- `build.build_profile(AnalysisRecord, name)` (analyze's contract), `build.from_analysis(Analysis)`
- `layers.views_from_profile / views_from_config` + `lint.lint(views, shape, facts)`
Schema and decisions: docs/profile-schema.md.
"""
