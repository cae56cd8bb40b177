"""suppress's fixtures, shared with the session window tests (tests/sessions/conftest.py) and defined
once in support.suppress: `run`, a query harness (`Run`) stopped after the test, and `provider`, a
test run once per state store provider suppress keeps its buffer in. A module's own fixture of the
same name (test_grace's `run`, test_late_records' `provider`) takes precedence."""
from support.suppress import provider, run

__all__ = ["provider", "run"]
