"""synthesize: profile schema, validation, compilation to scx_layered JSON, placement lint."""
