"""Comparisons built on the summary: each link against the baseline, the mechanisms
behind the differences, the what-if model, pairs and splits side by side, two runs."""
