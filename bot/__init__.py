"""Switchboard's application: CLI, config loading and, later, the gateway that wires channels to agents."""
