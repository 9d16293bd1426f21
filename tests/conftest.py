"""Session-wide pytest hooks."""

from tests.support.crds import summary_lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Print how many objects met the CRD schemas and how many CEL rules were really evaluated."""
    lines = summary_lines()
    if lines:
        terminalreporter.write_sep("-", "CRD validation")
        for line in lines:
            terminalreporter.write_line(line)
