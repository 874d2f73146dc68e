"""banlieue: a small, provider-agnostic VirtualMachine API for Kubernetes, realised on vSphere.

The same vSphere provider is a Cluster API v1beta2 infrastructure provider. Layers (imports point
downwards only): ``api`` -> ``runtime`` -> ``backends`` -> ``reconcilers`` -> ``cli``.
"""

__version__ = "0.1.0"
