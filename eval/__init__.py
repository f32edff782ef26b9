"""Applications that measure a policy: closed-loop evaluation (libero/: the loop every sim shares and LIBERO's
plug-in; sims.py: the plug-ins; sim_command.py: `eval aloha|droid`; eval_plots.py: its figures), speed benchmarks
(bench/), and the demo (demo.py, `oxygen-gym demo`)."""
