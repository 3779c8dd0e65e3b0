"""Helpers of the fuzz and security tests: a server in a background thread, raw HTTP, strategies."""
