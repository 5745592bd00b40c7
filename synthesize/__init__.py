"""synthesize: profile schema, validation, compilation to scx_layered JSON, placement lint, vetting.

Other stages and the CLI shell use synthesize only through `api` (its 43 names, grouped by kind;
docs/interfaces.md lists them and tests/test_boundaries.py holds everyone to them) and
`cli.register`. The rest is synthesize's own. Schema and decisions: docs/profile-schema.md.
"""
