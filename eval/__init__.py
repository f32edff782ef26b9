"""Applications that measure a policy: closed-loop LIBERO evaluation (libero/), speed benchmarks (bench/), and the
demo (demo.py, `oxygen-gym demo`)."""
