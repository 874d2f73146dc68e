"""API types of banlieue (v1alpha1): the one source of truth for every CRD.

Modules: ``meta`` (shared metav1/CAPI shapes, ``ApiModel``), ``conditions`` (condition helpers),
``core`` (banlieue.io kinds), ``infrastructure`` (infrastructure.banlieue.io kinds), ``kinds``
(kind metadata as data, ``parse_object``), ``crdgen`` / ``rbac`` / ``admission`` (generators).
"""
