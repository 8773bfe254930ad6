"""Inference backends: what launches a split model over the two hosts and streams its
tokens. `llamacpp` is the RPC backend (llama-server on A, ggml-rpc-server on B).
"""
