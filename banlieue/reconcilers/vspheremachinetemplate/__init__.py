"""The VSphereMachineTemplate controller (provider role): capacity and node info for CAPI autoscaling."""
