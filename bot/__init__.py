"""Switchboard's application: the CLI, config loading, and the gateway that wires channels to agents."""
