"""API types of banlieue (v1alpha1): the one source of truth for every CRD."""
