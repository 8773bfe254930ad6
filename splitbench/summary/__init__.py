"""The `aggregate` stage's statistics: each cell's figures with their ±, its
percentiles, tail shifts and service levels, the Parquet under results/summary/."""
