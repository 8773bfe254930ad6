"""What the report holds, in its order: the tables and the charts.

Plain names and words, no plotting or data libraries: the workflow reads these when it
plans (each is a file under results/), and importing pandas and altair there would cost
every `snakemake` call a second.
"""

# The tables splitbench.report.tables writes, each as markdown and CSV.
TABLE_STEMS = ["links", "link_comparison", "link_traffic", "single_stream_decode",
               "single_stream_prefill", "ttft", "concurrency_boundary", "overlap",
               "pairs", "mechanisms", "backends", "remeasured"]


# name -> (title, the question it answers); the report shows them in this order.
CHARTS: dict[str, tuple[str, str]] = {
    "decode_ms_per_token": (
        "Single-stream decode time per token by context",
        "How long does one token take on each link, and how does context length change it?",
    ),
    "decode_delta": (
        "Decode time per token minus the baseline link's",
        "What does each link add per token? A flat line across contexts is a fixed "
        "per-step cost (round trips), not a bandwidth cost.",
    ),
    "prefill_tps": (
        "Single-stream prefill by context",
        "How fast is the prompt processed on each link? Prefill moves large activations "
        "one way, so bandwidth shows here if anywhere.",
    ),
    "overlap": (
        "Overlap (true concurrency) by context and concurrency",
        "Do N streams really decode at the same time? 1 = fully concurrent, 0 = serial, "
        "below 0 = worse than serial.",
    ),
    "links": (
        "Link bandwidth and latency",
        "What does each link carry (iperf3, Gbit/s) and how long does a round trip take "
        "(ping, 16 KB request-response, its fixed part)?",
    ),
    "token_timeline": (
        "Token timeline of one concurrency cell",
        "When did each stream's tokens arrive on the absolute clock? Streams whose ticks "
        "interleave were decoded together; a staircase is serial prefill.",
    ),
    "decode_vs_latency": (
        "Decode time per token against link latency",
        "Decode less the time its token's bytes take on the link, against the link's "
        "latency: the fitted slope is the number of round trips each token pays for.",
    ),
    "backends": (
        "Backends side by side",
        "One model shape split by llama.cpp's RPC and by vLLM's tensor and pipeline "
        "parallel on the same links: which split decodes and prefills faster, and what "
        "does each move across the link per token?",
    ),
    "pairs": (
        "Pairs side by side",
        "How do the pairs of machines compare on the same model, context and "
        "concurrency, and what do their links measure?",
    ),
}
