"""The Tool contract, registry, policy pipeline, schema normalization, hooks and built-in tools."""
