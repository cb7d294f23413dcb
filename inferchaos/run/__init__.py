"""Running an experiment: its spec, the runner, the verdict and journal it writes, preflight and suites."""
