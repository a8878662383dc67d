"""Plug-in heads, one package per job:
- `inter/`: SimAKT's inter-student heads (interface and registry in inter/base.py);
- `simakt_config/`: SimAKT's configuration language (the typed schema, its parser, the loader of
  files and shipped presets), which finds head classes through the registry only;
- `ordinal/`: seed 002's plug-in ordinal attention mechanisms (base, mechanisms, pipeline; its
  seed files in ordinal/config.py);
- `gpcm.py`: the GPCM output layer and ordinal losses.
The inter-student heads are imported here so their registrations run before any SimAKT config is
parsed."""

from . import inter  # noqa: F401 -- registers the built-in inter-student heads
