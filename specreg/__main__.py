"""`python -m specreg`: the same entry point as the `specreg` console script."""

from specreg.cli import main

main()
