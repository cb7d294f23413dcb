"""The bottom layer: clients and primitives every layer above may use (README "Architecture").

Nothing here imports environments, faults, steady_state, experiments or reports.
"""
