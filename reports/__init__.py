"""Reports of a run: report.html (plots), junit.xml, summary.md and openmetrics.txt from a run
folder; a game day's summary.json, junit.xml and openmetrics.txt; the game-day index.html over
many run folders; and pushing a run's metrics to a Pushgateway. Entry points live in
:mod:`reports.render` (rendering) and :mod:`reports.pushgateway` (pushing)."""
