"""Reports of a run: report.html (plots), junit.xml, summary.md and openmetrics.txt from a run
folder, and the game-day index.html over many run folders. Entry points live in :mod:`reports.render`."""
