"""Plots for the notebooks, one module per topic (common, attention, memory, interpret, ordinal)."""
