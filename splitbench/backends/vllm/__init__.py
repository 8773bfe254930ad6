"""vLLM's tensor or pipeline parallel across the pair: rank 0 (the API server) on host A,
the headless rank 1 on host B, their traffic over the link under test."""
