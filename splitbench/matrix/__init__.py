"""The matrix a config asks for: its cells, blocks and each job's slice of the config
(`plan`), and how long measuring it should take (`estimate`)."""
