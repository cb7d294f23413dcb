"""The test suite (a package, so that the shared fakes import as ``tests.fakes``)."""
