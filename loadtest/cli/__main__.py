"""`python -m loadtest.cli`: the same as the `loadtest` console script."""

from loadtest.cli import main

main()
