"""``python -m inferchaos.cli``: the same as the ``inferchaos`` console script."""

from inferchaos.cli.main import main

main()
