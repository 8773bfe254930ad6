"""Links between hosts A and B: the `Link` record, the embedded lab's emulated links
(namespaces, veth, tc, the delay relay), real links on real interfaces, their verification
(throughput, ping, request-response latency) and the history of every verification.
"""
