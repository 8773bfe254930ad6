"""What crosses between the stages, typed, and nothing else: each job's slice of the
config (`slices`) and the check a command makes of it on entry (`slice_check`), the
records jobs write for later ones (`records`), every path under `results/`
(`results`), and which backends a run can name (`registry`). Every other package
stands on these; they stand on nothing of splitbench but its errors."""
