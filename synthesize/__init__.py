"""synthesize: profile schema, validation, compilation to scx_layered JSON, placement lint.

The stable entry points other stages use:
- `reader.load_profile(path) -> (Profile, SourceMap)`; `writer.dumps(profile) -> str`
- `rules.check_file(path) -> (Profile | None, [Diagnostic])`, `rules.validate(profile, ...)`
- `diagnostics.errors(found)`, `diagnostics.ProfileError(file, found)`
- `shape.parse_shape(spec) -> Shape`, `compile.compile_profile(profile, shape) -> Compiled`
  (`.specs` is the scx_layered layer config, `.notes` what was demoted)
- `oracle.check(specs) -> [mismatch]` (runs `scx_layered --print-and-exit`)
- `build.build_profile(AnalysisInput, name)`, `build.from_analysis(Analysis)`
- `layers.views_from_profile / views_from_specs` + `lint.lint(views, shape, facts)`
Schema and decisions: docs/profile-schema.md.
"""
