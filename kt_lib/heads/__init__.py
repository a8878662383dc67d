"""Plug-in heads: inter-student similarity heads (similarity_base.py: interface and registry;
similarity.py and similarity_trajectory.py: the built-in heads), configured by the typed schema
of simakt_schema.py (parsed by simakt_parse.py, loaded by simakt_config.py); ordinal attention
mechanisms (ordinal.py: the public names of ordinal_base.py, ordinal_mechanisms.py and
ordinal_pipeline.py; seed files read by ordinal_config.py), interpretable heads. Each module
owns its registry. The built-in similarity heads are imported here so their registrations run
before any SimAKT config is parsed (the schema finds head classes through the registry only)."""

from . import (
    similarity,  # noqa: F401 -- registers the built-in inter-student heads
    similarity_seed,  # noqa: F401 -- adapts seed 000's similarity modules
)
