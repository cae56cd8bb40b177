"""The session window tests' fixtures, suppress's (tests/suppress/conftest.py), defined once in
support.suppress: `run`, a query harness (`Run`) stopped after the test, and `provider`, a test run
once per state store provider suppress keeps its buffer in."""
from support.suppress import provider, run

__all__ = ["provider", "run"]
