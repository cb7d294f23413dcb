"""Fakes and helpers the tests share, imported as ``tests.fakes.<module>``.

Fakes stand in only at the suite's boundaries: the kube HTTP API (:mod:`apiserver`, with
:mod:`control_plane` behind it), the CUDA driver and NVML (:mod:`gpu`), an OpenAI SSE server
(:mod:`openai_server`), and the runner-level environment, probes and fault of
:mod:`runner`. Modules whose name ends in ``_fixtures`` hold pytest fixtures; tests/conftest.py
registers them through ``pytest_plugins``.
"""
