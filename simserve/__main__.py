"""`python -m simserve …`: the same as the `simserve` command."""

from simserve.cli import main

main()
