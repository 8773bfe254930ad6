"""llama.cpp's RPC backend: the toolchain on each host, the launch (workers on B, the
server on A), prompts of an exact token count, the streaming client with a per-segment
packet clock, and the figures derived from each reply.
"""
