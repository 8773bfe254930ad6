"""Whether a run can be trusted: its checks, the machine's drift over the run, the
anchor cells that measure it, and the re-measurements a drift asks for."""
