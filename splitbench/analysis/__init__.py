"""From measured rows to figures with uncertainty: the comparison of links against the
baseline, the bytes a token moves and their cost, and thermal drift detection.
"""
