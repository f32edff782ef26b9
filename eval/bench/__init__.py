"""`oxygen-gym bench`: every execution mode side by side against the paper's ideal-time model (sweep.py), and
`oxygen-gym bench serve`: the policy server under load from several robots (serve_bench_command.py)."""
