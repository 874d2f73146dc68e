"""The VSphereCluster controller (controller role): the CAPI InfraCluster of banlieue."""
