"""Plug-in heads: inter-student similarity heads (similarity.py, configured by the typed schema
of simakt_config.py), ordinal attention mechanisms (ordinal.py, seed files read by
ordinal_config.py), interpretable heads. Each module owns its registry."""
