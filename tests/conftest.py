"""Shared pytest configuration: fixtures for the API-server double and vcsim."""

pytest_plugins = [
    "banlieue.testing.apiserver.fixture",
    "banlieue.testing.vcsim",
]
