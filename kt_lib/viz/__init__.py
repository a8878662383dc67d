"""Plots for the notebooks, one module per topic: common (data, curves, ROC), interpret (AKT decay,
iDKT L0/T), irt (iKT3), memory (SimAKT banks), ordinal (GPCM), attention (maps of every model),
search (a tuning budget's committed trial record)."""

from .common import setup

__all__ = ["setup"]
