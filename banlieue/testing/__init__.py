"""Test doubles: the Kubernetes API-server double and the vcsim harness, with pytest fixtures."""
