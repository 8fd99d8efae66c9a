"""Options shared by the test files, and the PostgreSQL cluster plugin (tests/pg_cluster.py)."""

pytest_plugins = ["tests.pg_cluster"]




def pytest_addoption(parser):
    parser.addoption("--update-cases", action="store_true", default=False,
                     help="rewrite the marks and [diagnostics] sections of tests/cases/ from what the compiler reports")
