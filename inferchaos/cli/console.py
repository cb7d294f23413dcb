"""The rich console on stdout that every command prints its tables, rules and verdicts through."""

from __future__ import annotations

from rich.console import Console

# Shared rather than one per module: observe's live table is drawn on it, and one console
# keeps one idea of the terminal's width and colour support for all of a command's output.
console = Console()
