"""banlieue's controller runtime: informer, cache, workqueue, controller, manager.

Follows client-go and controller-runtime semantics and names; knows nothing about VMs.
"""
