"""The `bot` command line, one module per command group; `main` parses the arguments and imports the heavy parts
only when a command needs them."""
