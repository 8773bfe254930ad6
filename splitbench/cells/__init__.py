"""The measuring stage: one benchmark cell (model x link x context x concurrency) against
a launch, and the round-trip delay sweep, a series of single-stream cells at added delays.
"""
