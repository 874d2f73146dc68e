"""Reconcilers: one module per CRD, ``decide(snapshot) -> Plan`` plus thin wiring."""
