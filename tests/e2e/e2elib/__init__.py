"""Helpers of the end-to-end checks (tests/e2e): counter reading, evidence, pass/fail logic, plumbing.

Everything that can run without a cluster is a pure function or takes a command runner, so the unit
suite (tests/test_e2e_helpers.py) drives it with a fake runner and canned observations.
"""
