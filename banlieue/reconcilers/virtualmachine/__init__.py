"""The VirtualMachine controller (controller role): schedules a VirtualMachine onto a Provider's
failure domain (``scheduler``, ``placement_totals``), applies its VSphereMachine
(``machine_decide``) and mirrors that machine's status back (``status_mirror``)."""
