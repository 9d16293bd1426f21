"""`python -m tools.spend`: who spent what, who is near the limit, and when each window resets."""
