"""CAPI-core simulator, v1beta2 contract checker and issue-7 acceptance tests (package ``capi``)."""
