"""Fault suite (issue 10): API and vCenter faults, crashes, leader election, drift, bad input, security."""
