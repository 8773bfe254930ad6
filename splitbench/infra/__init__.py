"""What every stage stands on: where a command runs (this machine, a namespace, a host
over SSH), the processes a run starts and stops, Parquet files with provenance, the
archive that keeps re-measured results, and the state of the machines around a
measurement (sensor telemetry, interference from other processes, woken idle CPUs, TCP
counters read over netlink).
"""
