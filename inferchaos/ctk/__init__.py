"""Chaos Toolkit glue: the providers `chaos run` calls, the live hypothesis and discovery."""
