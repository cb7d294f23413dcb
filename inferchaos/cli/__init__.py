"""The command line: `inferchaos` and its command groups."""
