"""The CAPI tier (package ``capi``): real Cluster API (``capi.real``, ``test_real_capi*.py``,
``test_clusterctl.py``), the v1beta2 contract checker, and the CAPI-core simulator where real CAPI
cannot reach (``capi.simulator`` docstring).

- ``capi.crds``: minimal ``cluster.x-k8s.io/v1beta2`` Cluster/Machine CRDs; ``install(client)``.
- ``capi.simulator``: ``CapiSimulator(client, namespace, cluster_name, infra_cluster_name)`` doing
  what CAPI core does by contract (``create_cluster``, ``sync``/``running``, ``create_machine``,
  ``scale``, ``pause``/``unpause``, ``delete_machine``,
  ``delete_all_machines``); ``pick_failure_domain`` (KCP's fewest-machines rule).
- ``capi.contract``: ``check_crd``, ``check_infra_machine``, ``check_infra_cluster``,
  ``check_infra_machine_template`` (AssertionError listing every violation).
- ``capi.env`` + fixture ``capi_env`` (conftest): API double, two vcsims, two Providers,
  ``banlieue manager`` subprocess, a pyVmomi oracle; fixtures ``capi_managers`` (session) and
  ``real_capi``: the same on envtest's kube-apiserver driven by the real CAPI managers.
"""
