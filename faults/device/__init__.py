"""Device-layer faults: memory squatting on a GPU or on a local replica's memory budget.

The fault is :mod:`faults.device.squat`; its Chaos Toolkit provider module is
:mod:`inferchaos.ctk.device_actions`.
"""
