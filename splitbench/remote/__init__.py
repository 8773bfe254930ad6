"""Code that runs on the hosts themselves, shipped to host B as source (`python -c`).

Every module here imports only the standard library: host B needs nothing but a Python 3
interpreter. tests/unit/test_remote.py holds them to that.
"""
