"""CAPI-core simulator, v1beta2 contract checker and issue-7 acceptance tests (package ``capi``).

- ``capi.crds``: minimal ``cluster.x-k8s.io/v1beta2`` Cluster/Machine CRDs; ``install(client)``.
- ``capi.simulator``: ``CapiSimulator(client, namespace, cluster_name, infra_cluster_name)`` doing
  what CAPI core does by contract (``create_cluster``, ``sync``/``running``, ``create_machine``,
  ``scale``, ``provide_bootstrap``, ``pause``/``unpause``, ``delete_machine``,
  ``delete_all_machines``); ``pick_failure_domain`` (KCP's fewest-machines rule).
- ``capi.contract``: ``check_crd``, ``check_infra_machine``, ``check_infra_cluster``,
  ``check_infra_machine_template`` (AssertionError listing every violation).
- ``capi.env`` + fixture ``capi_env`` (conftest): API double, two vcsims, two Providers,
  ``banlieue manager`` subprocess, a pyVmomi oracle.
"""
