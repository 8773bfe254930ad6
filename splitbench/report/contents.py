"""What the report holds, in its order: the tables and the charts.

Plain names and words, no plotting or data libraries: the workflow reads these when it
plans (each is a file under results/), and importing pandas and altair there would cost
every `snakemake` call a second.
"""

# The tables splitbench.report.aggregate writes, each as markdown and CSV.
TABLE_STEMS = ["links", "link_comparison", "link_traffic", "single_stream_decode",
               "single_stream_prefill", "ttft", "percentiles", "service_levels",
               "concurrency_boundary", "overlap", "pairs", "mechanisms", "backends",
               "remeasured"]


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
    "decode_sensitivity": (
        "What if my link were X: decode against link latency",
        "How fast would each model decode on a link of another latency? Predicted from "
        "this run's baseline step, round trips and bytes per token; the links measured "
        "here are the points. Where the curve is flat, the link no longer matters.",
    ),
    "prefill_tps": (
        "Single-stream prefill by context",
        "How fast is the prompt processed on each link? Prefill moves large activations "
        "one way, so bandwidth shows here if anywhere.",
    ),
    "token_gaps": (
        "Gaps between tokens: median to p99 per link",
        "Does a link shift every token's time alike, or widen the tail (jitter)? Each "
        "bar runs from a single stream's median gap between tokens to its p99; the tick "
        "is the p90, the dot the longest gap.",
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


# stem -> what to read from the table: one sentence, printed under its title after
# "Read:". The tables other steps write (round trips, drift) have theirs too.
TABLE_READING: dict[str, str] = {
    "links": (
        "what each link carries each way (Gbit/s) and what a round trip costs (fixed "
        "overhead, 16 KB p50); a flag means the link was measured under load, or not at "
        "all (✗ verification failed)."),
    "link_comparison": (
        "the decode Δ column (ms/token the link adds per token) against its ±; a ± wider "
        "than the Δ means the link's cost is not resolvable here, and 'measured vs "
        "predicted' says whether latency and bandwidth explain it."),
    "link_traffic": (
        "the bytes a decoded token moves each way against the prediction from the model's "
        "shape, and the transfer column: what those bytes cost per token on that link."),
    "single_stream_decode": (
        "tok/s down a column shows what each link costs one stream; the last column, how "
        "much of its speed a link keeps from the shortest to the longest context."),
    "single_stream_prefill": (
        "tok/s across a row shows how prefill slows with context; down a column, whether "
        "the link matters for prefill at all."),
    "ttft": (
        "TTFT against 'prompt ÷ server prefill': the rest column is what the time to first "
        "token spends outside the server's own prefill (HTTP, the first decode step, the "
        "link)."),
    "concurrency_boundary": (
        "the number is the highest concurrency that worked at that context; the bracket "
        "says how the next level failed."),
    "overlap": (
        "near 1 the streams really decode at the same time, near 0 they take turns, below "
        "0 running them together is slower than one after another."),
    "pairs": (
        "the same cell on each pair of machines side by side; a gap between pairs includes "
        "everything that differs between the machines, not only the link."),
    "mechanisms": (
        "the verdict column: how many round trips of link latency a decoded token pays, "
        "and per link whether latency or bandwidth dominates its cost; 'not resolvable' "
        "where the data cannot say."),
    "backends": (
        "one model shape under each split on the same link: decode and prefill say which "
        "split is faster, bytes/token how much each moves across the link."),
    "percentiles": (
        "the p99 columns against the p50s: how long the slowest 1% of tokens, first "
        "tokens and requests take, beside the typical one."),
    "service_levels": (
        "the verdict column: which cells hold the config's service level by its 95% "
        "interval, fail it, or cannot tell at this sample size (and about how many "
        "requests would); the findings name each link's most streams that hold it."),
    "remeasured": (
        "the decode Δ column: how far a re-measured cell moved from its archived "
        "measurement to the current one."),
    "round_trips": (
        "round trips per token with its ±: the blocking exchanges each decoded token "
        "makes over the link; 'of which' splits it, from the packets, into what the turns "
        "waited and host A's own time, per ms of latency; 'not resolvable' says why a "
        "figure cannot be used."),
    "drift": (
        "each cell suspected of drift and why: its figures may reflect the machine's "
        "state at that time rather than the link."),
}
