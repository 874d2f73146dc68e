"""The Provider controller (provider role): reachability, capabilities and failure domains of one
vCenter (``decide``), its deletion guard (``deletion``), wake-ups on reachability changes
(``reachability``) and the label-safe slugs of failure-domain names (``slug``)."""
