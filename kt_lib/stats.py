"""The names notebooks import for paired comparisons (see `kt_lib.runs.stats`)."""

from .runs.stats import compare_pairs, paired_comparison, pairs_markdown

__all__ = ["compare_pairs", "paired_comparison", "pairs_markdown"]
