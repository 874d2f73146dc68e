"""Backends: the ``Backend`` protocol a hypervisor must offer, and its implementations."""
