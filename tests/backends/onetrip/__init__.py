"""onetrip: a test-only splitbench backend, registered by naming this folder in
SPLITBENCH_BACKENDS. Each decoded token costs exactly one round trip to host B."""
