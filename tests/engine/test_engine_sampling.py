"""Temperature sampling is really sampling: tokens drawn at temperature T follow softmax(logits / T), and differ
from greedy.

The mode-equivalence tests compare modes with each other, so a bug that made every mode greedy at once (or ignored
T everywhere) would pass them. These tests compare draws with a distribution computed here instead: at the token
chooser on crafted logits, and end to end through the policy against first-token logits computed from the model
directly. Every generator is seeded, so each p-value below is a fixed number (measured values in comments); the
thresholds leave orders of magnitude on both sides: the right distribution gives p > 1e-3, a wrong one p < 1e-6."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.engine.request import Request
from oxygen_gym.engine.sampling import choose_tokens
from oxygen_gym.policies.language import task_prompt_ids
from policy_obs import make_obs

ACCEPT = 1e-3  # p-value above which draws are taken to follow the distribution
REJECT = 1e-6  # p-value below which draws are taken not to

# 8 tokens, a non-degenerate softmax at both temperatures: with 4000 draws every bin expects >= 33 draws, and the
# two temperatures' distributions are far apart (noncentrality ~1000 with 7 degrees of freedom).
LOGITS = torch.tensor([1.6, 1.1, 0.7, 0.4, 0.0, -0.3, -0.8, -1.2])
DRAWS = 4000


def _softmax(logits: torch.Tensor, temperature: float) -> np.ndarray:
    p = torch.softmax(logits.double() / temperature, -1).numpy()
    return p / p.sum()


def _p_value(tokens, probs: np.ndarray) -> float:
    counts = np.bincount(np.asarray(tokens), minlength=len(probs))
    return float(chisquare(counts, len(tokens) * probs).pvalue)


def _request(rid: int, temperature: float, seed: int) -> Request:
    return Request(rid, "t", 0, [5], max_new_tokens=10_000, eos_id=-1, temperature=temperature, seed=seed)


# ---------------------------------------------------------------------------------------------- the token chooser
@pytest.mark.parametrize("temperature,other", [(0.7, 1.5), (1.5, 0.7)])
def test_draws_follow_the_softmax_at_their_temperature(temperature, other):
    """4000 requests with distinct seeds in one batch, and one request drawing 4000 times in a row: both follow
    softmax(logits / T) (measured p = 0.98 / 0.29 at T=0.7, 0.10 / 0.41 at T=1.5), and neither follows the softmax
    at the other temperature or at T=1, as a chooser that ignores T would draw (measured p < 1e-60 for each)."""
    batch = [_request(i, temperature, seed=1000 + i) for i in range(DRAWS)]
    across = choose_tokens(LOGITS.expand(DRAWS, -1), batch)
    one = _request(0, temperature, seed=7)
    repeated = [choose_tokens(LOGITS[None], [one])[0] for _ in range(DRAWS)]
    for name, tokens in (("distinct seeds", across), ("one request", repeated)):
        p = _p_value(tokens, _softmax(LOGITS, temperature))
        assert p > ACCEPT, f"{name}: draws at T={temperature} do not follow softmax(logits / T): p = {p:.3g}"
        for wrong in (other, 1.0):
            p = _p_value(tokens, _softmax(LOGITS, wrong))
            assert p < REJECT, f"{name}: draws at T={temperature} also pass for T={wrong} (p = {p:.3g})"
        greedy = int(LOGITS.argmax())
        assert sum(t != greedy for t in tokens) > DRAWS // 4, f"{name}: draws at T={temperature} are mostly greedy"


def test_greedy_rows_stay_argmax_and_a_row_does_not_depend_on_its_batch():
    """A batch mixing greedy (T=0) and sampled rows, over 30 steps: greedy rows are each row's argmax, and every
    sampled row draws exactly the tokens its seed draws alone (its own generator, whatever shares the batch)."""
    rng = np.random.default_rng(0)
    rows, steps = 12, 30
    temps = [0.0, 0.8, 1.3, 0.0, 2.0, 0.8, 0.0, 1.0, 0.5, 0.0, 1.3, 3.0]
    seeds = [int(s) for s in rng.integers(0, 2**31, rows)]
    logits = torch.from_numpy(rng.normal(0, 1.5, (steps, rows, 8)).astype(np.float32))

    batched = [_request(i, temps[i], seeds[i]) for i in range(rows)]
    in_batch = [choose_tokens(logits[s], batched) for s in range(steps)]
    alone = []
    for i in range(rows):
        r = _request(i, temps[i], seeds[i])
        alone.append([choose_tokens(logits[s, i][None], [r])[0] for s in range(steps)])
    # the same rows again in reverse order and without the greedy ones: other companions, other row indices
    sampled = [i for i in range(rows) if temps[i] > 0][::-1]
    others = [_request(i, temps[i], seeds[i]) for i in sampled]
    regrouped = [choose_tokens(logits[s, sampled], others) for s in range(steps)]

    for i in range(rows):
        column = [in_batch[s][i] for s in range(steps)]
        if temps[i] == 0:
            assert column == logits[:, i].argmax(-1).tolist(), f"greedy row {i} is not the argmax"
        else:
            assert column == alone[i], f"row {i} (T={temps[i]}) draws differently in a batch than alone"
            assert [regrouped[s][sampled.index(i)] for s in range(steps)] == alone[i], f"row {i}: other companions"
            assert column != logits[:, i].argmax(-1).tolist(), f"row {i} (T={temps[i]}) drew the greedy tokens"


# ---------------------------------------------------------------------------------------------- through the policy
PROMPT = "Say something."


@pytest.fixture(scope="module")
def obs():
    return make_obs("libero", np.random.default_rng(5))


def _policy(mode: str, tasks, k: int, num_slots: int = 8, seed: int = 0) -> MultiTaskPolicy:
    policy = MultiTaskPolicy.from_pretrained("tiny", robot="libero", tasks=tasks, decode_budget=k, mode=mode, seed=0,
                                             num_slots=num_slots)
    if seed != 0:
        policy.reset(seed=seed)  # the same weights (built from seed 0), sampling from `seed`
    return policy


def _run(mode: str, seed: int = 0, frames: int = 6):
    """A sampled task (T=1) and a greedy task with the same prompt, both started every frame on the same
    observations: {request_id: (task, generated tokens)}."""
    rng = np.random.default_rng(11)
    tasks = [LanguageTask("sampled", PROMPT, max_new_tokens=8, temperature=1.0),
             LanguageTask("greedy", PROMPT, max_new_tokens=8, temperature=0.0)]
    out: dict[int, tuple[str, list[int]]] = {}
    with _policy(mode, tasks, k=3, seed=seed) as policy:
        for _ in range(frames):
            for u in policy.act(make_obs("libero", rng))[1]:
                out.setdefault(u.request_id, (u.task, []))[1].extend(u.new_token_ids)
    return out


@pytest.fixture(scope="module")
def oxygen_run():
    return _run("oxygen")


# `parallel` is left out: spawning its two worker processes costs ~9 s here (tests/policy/test_policy_api.py's parallel
# case), and its language worker runs the `isolated` scheduler, which is checked below.
@pytest.mark.parametrize("mode", ["shared", "isolated"])
def test_sampled_text_differs_from_greedy_and_is_the_same_in_every_mode(oxygen_run, mode):
    """Frame f starts request 2f (sampled, T=1) and 2f+1 (greedy) on the same prefix and prompt: the sampled tokens
    are not the greedy ones, and each mode draws the very same sampled tokens (oxygen's last requests are still in
    flight: their prefix)."""
    ref = _run(mode)
    pairs = [(ref[rid][1], ref[rid + 1][1]) for rid in range(0, len(ref), 2)]
    assert all(ref[rid][0] == "sampled" and ref[rid + 1][0] == "greedy" for rid in range(0, len(ref), 2))
    assert len(pairs) == 6 and all(len(g) == 8 for _, g in pairs), "greedy requests ended early: weak comparison"
    differ = sum(s != g for s, g in pairs)
    assert differ >= 5, f"{mode}: only {differ} of 6 sampled requests differ from greedy on the same prefix"
    assert len({t for s, _ in pairs for t in s}) > 20, f"{mode}: sampled tokens at T=1 are not varied"
    done = [rid for rid, (_, toks) in oxygen_run.items() if len(toks) == 8]
    assert len(done) >= 6
    for rid, (task, toks) in oxygen_run.items():
        assert toks == ref[rid][1][: len(toks)], f"request {rid} ({task}): oxygen and {mode} sampled differently"


def test_another_policy_seed_draws_other_tokens(oxygen_run):
    """The same weights, request ids and observations with sampling seed 1 instead of 0: the greedy requests are
    unchanged and the sampled ones are not."""
    other = _run("oxygen", seed=1)
    assert other.keys() == oxygen_run.keys()
    greedy = [rid for rid, (task, _) in other.items() if task == "greedy"]
    sampled = [rid for rid, (task, _) in other.items() if task == "sampled"]
    assert all(other[rid] == oxygen_run[rid] for rid in greedy)
    assert sum(other[rid][1] != oxygen_run[rid][1] for rid in sampled) >= len(sampled) - 1


def _first_token_logits(policy: MultiTaskPolicy, obs: dict, prompt: str) -> torch.Tensor:
    """The next-token logits after the observation's prefix and the task prompt, from the model directly (one
    prefill into a private cache, the whole prompt in one extend), not through the engine."""
    m = policy.model
    p = policy.model_inputs(obs)
    ids = task_prompt_ids(policy.tokenizer, prompt)
    prefix = m.embed_prefix(p.images, p.image_masks, p.tokens, p.token_masks)
    cache = m.new_cache(1, prefix.max_len + len(ids))
    m.prefill(cache, prefix)
    hidden = m.extend(cache, torch.tensor([ids], device=m.device), prefix.lengths)
    return m.lm_logits(hidden[:, -1])[0].float().cpu()


def test_first_sampled_tokens_follow_the_softmax_of_the_models_logits(obs):
    """20 sampled tasks, one token each, on one fixed observation for 30 frames: the 600 first tokens follow
    softmax(first-token logits / T) over bins of the 8 likeliest tokens and the rest (measured p = 0.78); the same
    draws reject T=1, as a temperature ignored would draw (measured p = 0 in float64), and are mostly not greedy.

    T = 0.1 because the tiny random model's logits are nearly flat (std ~0.2 over 1024 tokens): at T=1 the likeliest
    token has p ~ 0.002; at T=0.1 the 8 likeliest hold p = 0.43 here (0.22 for the first), every bin expects >= 9."""
    temperature, per_frame, frames = 0.1, 20, 30
    tasks = [LanguageTask(f"s{i}", PROMPT, max_new_tokens=1, temperature=temperature) for i in range(per_frame)]
    tokens = []
    with _policy("oxygen", tasks, k=1, num_slots=per_frame + 1) as policy:
        logits = _first_token_logits(policy, obs, PROMPT)
        for _ in range(frames):
            updates = policy.act(obs)[1]
            assert len(updates) == per_frame and all(u.done for u in updates)
            tokens += [u.new_token_ids[0] for u in updates]
    assert len(tokens) == per_frame * frames
    top = logits.topk(8).indices.tolist()
    bins = np.array([top.index(t) if t in top else len(top) for t in tokens])

    def binned(t: float) -> np.ndarray:
        p = _softmax(logits, t)
        return np.append(p[top], 1.0 - p[top].sum())

    expected = binned(temperature)
    assert (len(tokens) * expected).min() >= 5, "a bin expects fewer than 5 draws: the chi-square is not valid"
    p = _p_value(bins, expected)
    assert p > ACCEPT, f"first tokens at T={temperature} do not follow the model's softmax: p = {p:.3g}"
    assert _p_value(bins, binned(1.0)) < REJECT, "first tokens at T=0.1 also pass as T=1 draws"
    assert (bins != 0).sum() > len(tokens) // 2, "first tokens at T=0.1 are mostly the greedy token"
