"""The evaluation loop of every sim (its particulars are a plug-in, eval/sims.py): pick the shard's unfinished
episodes, run them (here or on Ray workers), append each record durably as it finishes, keep the summary current,
show progress, and draw the plots (eval/eval_plots.py) when the run ends."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .eval_config import ABSENT_DEFAULTS, RESULT_FIELDS, EvalConfig, refuse_removed_options, with_declarations
from .episode_set import EpisodeSpec, record_key, shard
from .progress import EvalProgress
from .results import ResultsError, ResultsFolder
from .summary import write_summary
from .worker import run_episode_spec

# Runs a list of episodes and yields one record per episode as each finishes (any order).
Executor = Callable[[list[EpisodeSpec], EvalConfig], Iterator[dict]]


def local_executor(specs: list[EpisodeSpec], config: EvalConfig, step_progress: bool = False) -> Iterator[dict]:
    """Episodes one after another in this process, with one policy kept across them (and across runs in the same
    process with the same settings; `worker.close_worker()` releases it, as does interpreter exit). `step_progress`:
    a bar over each episode's steps below the episodes bar."""
    for spec in specs:
        yield run_episode_spec(spec, config, progress=step_progress)


local_executor.step_progress = True  # run_eval passes step_progress=True to executors that say they take it


def selected_episodes(config: EvalConfig) -> list[EpisodeSpec]:
    """This shard's part of the episode set, in a run order that keeps each task's env alive across its episodes."""
    from ..sims import get_sim

    specs = get_sim(config.env).episode_set(config.suites, config.tasks, config.episodes, config.seeds,
                                            config.init_states, config.fresh_scenes)
    mine = set(shard(specs, *config.shard))
    return [s for s in specs if s in mine]


def check_resumable(folder: ResultsFolder, config: EvalConfig) -> None:
    """A folder may only be resumed by a run whose results would be comparable."""
    old = folder.read_config()
    if old is None:
        if folder.records:
            raise ResultsError(f"--out {folder.out}: episodes.jsonl exists without config.json; use a new --out")
        return
    new = config.result_fields()
    refuse_removed_options(old, f"--out {folder.out}")
    diffs = [k for k in RESULT_FIELDS if old.get(k, ABSENT_DEFAULTS.get(k)) != new.get(k)]
    if diffs:
        detail = ", ".join(f"{k} was {old.get(k)!r}, now {new.get(k)!r}" for k in diffs)
        hint = ("; replan None was the protocol's interval, run before the checkpoint declared replan_steps"
                if "replan" in diffs and old.get("replan") is None else "")
        if "language_tasks" in diffs and not old.get("language_tasks"):
            hint += ("; the checkpoint declares language tasks, run by default since (add --no-language to resume a "
                     "run without them)")
        if "noise_scale" in diffs and old.get("noise_scale", ABSENT_DEFAULTS["noise_scale"]) == 1.0:
            hint += ("; noise_scale 1.0 was the reference sampler (a folder run with --noise-scale 1, or before the "
                     "checkpoint declared noise_scale)")
        raise ResultsError(f"--out {folder.out} holds results of a different evaluation ({detail}{hint}); "
                           f"rerun with the same settings to resume, or choose a new --out")


def run_eval(config: EvalConfig, executor: Executor = local_executor, progress: bool = True,
             log: Callable[[str], None] | None = None) -> dict:
    """Run (or resume) the evaluation `config` describes; returns the summary of everything in `config.out`.
    `progress`: bars over episodes (and, run here, over each episode's steps); `log`: where the one-line notes go
    (what a resumed run finds done, how to get videos); None says nothing."""
    from ..eval_plots import write_plots

    config = with_declarations(config)
    specs = selected_episodes(config)
    with ResultsFolder(config.out) as folder:
        check_resumable(folder, config)
        folder.write_config(config.to_dict())
        done = folder.done_keys()
        todo = [s for s in specs if s.key not in done]
        spec_keys = {s.key for s in specs}
        done_here = [r for r in folder.records if record_key(r) in spec_keys]
        expected = len(specs)
        if log is not None:
            for line in start_notes(config, len(done_here), expected):
                log(line)
        desc = f"eval {config.shard[0]}/{config.shard[1]}" if config.shard[1] > 1 else "eval"
        with EvalProgress(expected, done_here, desc=desc, disable=not progress) as bar:
            steps = {"step_progress": True} if progress and getattr(executor, "step_progress", False) else {}
            records: Iterable[dict] = executor(todo, config, **steps) if todo else iter(())
            try:
                for record in records:
                    folder.append(record)
                    bar.update(record)
                    write_summary(config.out, folder.records, config.to_dict(), expected)
            finally:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
        plots = write_plots(config.out, folder.records)
        return write_summary(config.out, folder.records, config.to_dict(), expected, plots=plots)


def start_notes(config: EvalConfig, done: int, expected: int) -> list[str]:
    """What a user should know before the bars start: a resumed run's count first, then how to get videos."""
    notes = []
    if done:
        notes.append(f"resuming: {done} of {expected} episodes done"
                     + (" (nothing left to run)" if done >= expected else ""))
    if config.video == "none" and done < expected:
        notes.append("videos: off (add --video all, --video failures or --video N for the first N episodes of each "
                     "task)")
    return notes
