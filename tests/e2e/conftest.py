"""Fixtures of the end-to-end tests (defined in :mod:`harness`)."""

from .harness import manager_env

__all__ = ["manager_env"]
