"""Options shared by the test files."""


def pytest_addoption(parser):
    parser.addoption("--update-cases", action="store_true", default=False,
                     help="rewrite the marks and [diagnostics] sections of tests/cases/ from what the compiler reports")
