"""`python -m bot` runs the same CLI as the `bot` console script."""

from bot.cli.main import main

main()
