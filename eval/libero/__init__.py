"""Closed-loop evaluation (`oxygen-gym eval libero|aloha|droid|merge`): the run's config (eval_config), its
deterministic episode set and shards (episode_set), one episode in a worker process (worker) or on Ray
(ray_executor), the loop that appends each record durably as it finishes (eval_loop, results), and the summaries
over seeds (summary, merge). The loop is the same for every sim; LIBERO's particulars are its plug-in (libero_sim,
the interface in ../sims.py, which also holds ALOHA's and DROID's)."""
