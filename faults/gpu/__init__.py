"""Device-layer faults: memory squatting on a GPU or on a local replica's memory budget."""
