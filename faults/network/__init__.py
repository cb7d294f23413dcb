"""Network-layer faults: the links between Ray nodes (the local environment's worker namespaces)."""
