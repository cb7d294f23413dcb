"""The Chaos Toolkit provider module of the device layer (the squat itself lives in faults.gpu)."""
