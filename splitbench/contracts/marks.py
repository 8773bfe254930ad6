"""The marks tables, findings and checks put beside a figure."""

# A figure measured under interference or with tokens that share a timestamp, or a
# measurement that disagrees with its prediction beyond its uncertainty.
FLAG_MARK = "\u26a0"
