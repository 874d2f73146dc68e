"""Reconcilers: one package per controller (``<kind>/controller.py`` wiring + ``decide.py`` pure
step), and the modules several controllers share (docs/layout.md)."""
