"""Plug-in heads: inter-student similarity heads (similarity.py), ordinal attention mechanisms
(ordinal.py), interpretable heads. Each module owns its registry."""
