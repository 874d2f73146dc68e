"""The vSphere backend: pyvmomi behind an async adapter (``VSphereBackend``)."""

from banlieue.backends.vsphere.backend import VSphereBackend

__all__ = ["VSphereBackend"]
