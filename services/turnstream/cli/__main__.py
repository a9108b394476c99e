"""`python -m turnstream.cli` is the `turnstream` command."""

from turnstream.cli import main

main()
