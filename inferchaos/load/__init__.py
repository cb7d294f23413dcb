"""Locust: the locustfile and the runner that keeps it streaming through a fault."""
