"""The VMImage controller (provider role): per-Provider template lookup rows (``decide``)."""
