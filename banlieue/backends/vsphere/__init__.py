"""The vSphere backend: pyvmomi behind an async adapter."""
