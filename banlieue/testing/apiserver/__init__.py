"""An in-memory Kubernetes API-server double that behaves like kube-apiserver on the wire."""
