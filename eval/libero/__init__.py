"""Closed-loop LIBERO evaluation (`oxygen-gym eval libero|merge`): the run's config (eval_config), its deterministic
episode set and shards (episode_set), one episode in a worker process (worker) or on Ray (ray_executor), the loop that
appends each record durably as it finishes (eval_loop, results), and the summaries over seeds (summary, merge)."""
