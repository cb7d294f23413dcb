"""inferchaos core: errors and paths shared by every layer."""
