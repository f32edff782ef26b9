"""Language tasks and the decode budget from command-line text: one parser for eval, demo and serve."""
from __future__ import annotations

# Prompts for the language tasks a user can name with `--task NAME` (`--task NAME=PROMPT` sets any prompt).
TASK_PROMPTS = {
    "narrate": "Describe what the robot is doing.",
    "plan": "What should the robot do next?",
    "memory": "What has the robot done so far?",
}
DEFAULT_MAX_NEW_TOKENS = 30  # a task's token cap when neither the command line nor the checkpoint's own task sets one


def parse_decode_budget(text: str | int) -> int | str:
    if str(text).strip() == "auto":
        return "auto"
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"--decode-budget: {text!r} not understood; expected a positive integer or 'auto'") from None
    if k < 1:
        raise ValueError(f"--decode-budget: {k}; expected a positive integer or 'auto'")
    return k


def parse_language_task(text: str, max_new_tokens: int | None, every: int = 1, trained: dict | None = None) -> dict:
    """`--task narrate` (a named preset, or the checkpoint's own task of that name: `trained`, name -> {prompt[,
    max_new_tokens, adapter]} from its config.json `language_tasks` or its training.json and its adapters' ones,
    wins, since a trained model answers only the prompt it was trained on; an adapter's task keeps its adapter) or
    `--task NAME=PROMPT`. `max_new_tokens` None: the checkpoint's own task's cap where it has one, else
    DEFAULT_MAX_NEW_TOKENS; a number always wins."""
    name, sep, prompt = str(text).partition("=")
    name = name.strip()
    if not name:
        raise ValueError(f"--task: {text!r} has no name; expected e.g. narrate or plan='What next?'")
    adapter = own_tokens = None
    if not sep and trained and name in trained:
        prompt, adapter = trained[name]["prompt"], trained[name].get("adapter")
        own_tokens = trained[name].get("max_new_tokens")
    elif not sep:
        if name not in TASK_PROMPTS:
            raise ValueError(f"--task: unknown task {name!r}; named ones are {', '.join(TASK_PROMPTS)}, "
                             f"or give a prompt as NAME=PROMPT")
        prompt = TASK_PROMPTS[name]
    if not prompt.strip():
        raise ValueError(f"--task: {text!r} has an empty prompt")
    if max_new_tokens is None:
        max_new_tokens = own_tokens or DEFAULT_MAX_NEW_TOKENS
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens: {max_new_tokens}; expected >= 1")
    out = {"name": name, "prompt": prompt.strip(), "max_new_tokens": int(max_new_tokens), "every": int(every)}
    if adapter:  # a checkpoint's own adapter task (its adapters/<name>/training.json): it answers only through it
        out["adapter"] = adapter
    return out
