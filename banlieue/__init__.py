"""banlieue: a small, provider-agnostic VirtualMachine API for Kubernetes, realised on vSphere.

The same vSphere provider is a Cluster API v1beta2 infrastructure provider. Layers (imports point
downwards only): ``api`` -> ``runtime`` -> ``backends`` -> ``reconcilers`` -> ``cli``.

Importing the package first defers kubernetes_asyncio's generated API and model modules until
something uses one (``banlieue.lazy_imports``): about a third of the manager's memory otherwise.
"""

from banlieue.lazy_imports import defer_kubernetes_asyncio_models

defer_kubernetes_asyncio_models()

__version__ = "0.1.0"
