"""Per-task LoRA adapters decode in one batch with the base model's requests: each request gets exactly the tokens
it gets alone with its adapter merged into the weights, while the frame's prefill and the actions stay the base
model's, bit for bit (model/lora_bank.py)."""
import numpy as np
import pytest
import torch

from lora_fixtures import decode_alone, merged_reference, write_random_adapter
from oxygen_gym import LanguageTask, MultiTaskPolicy
from oxygen_gym.model.lora_bank import AdapterError
from policy_obs import make_obs

ATTN = ("self_attn.q_proj", "self_attn.v_proj")
ALL = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
       "mlp.down_proj")
TASKS = [
    LanguageTask("narrate", "What is the robot doing?", 8),
    LanguageTask("memory", "Where is the bowl?", 8, adapter="mem"),
    LanguageTask("plan", "What next?", 8, adapter="plan"),
]


def _policies(name, tmp_path, gain=1.0):
    base = MultiTaskPolicy.from_pretrained(name, tasks=TASKS[:1], decode_budget=3, seed=3)
    mem, w_mem = write_random_adapter(tmp_path / "mem", base.model, ATTN, rank=4, alpha=8.0, seed=1, gain=gain)
    plan, w_plan = write_random_adapter(tmp_path / "plan", base.model, ALL, rank=2, alpha=3.0, seed=2, gain=gain)
    policy = MultiTaskPolicy.from_pretrained(
        name, tasks=TASKS, decode_budget=3, seed=3, adapters={"mem": mem, "plan": plan}
    )
    return base, policy, {"mem": w_mem, "plan": w_plan}


@pytest.mark.parametrize("name", ["tiny", "xr0-tiny"])
def test_mixed_batch_matches_each_request_alone_with_its_adapter_merged(name, tmp_path):
    base, policy, weights = _policies(name, tmp_path)
    rng = np.random.default_rng(0)
    observations = [make_obs("libero", rng) for _ in range(4)]
    texts: dict[int, list[int]] = {}
    tasks: dict[int, tuple[str, int]] = {}
    batch_mix = []
    for frame, obs in enumerate(observations):
        actions, updates = policy.act(obs)
        base_actions, _ = base.act(obs)
        assert np.array_equal(actions, base_actions), "actions changed by loading adapters"
        batch_mix.append(max(policy.last_frame["batch_sizes"], default=0))
        for u in updates:
            texts.setdefault(u.request_id, []).extend(u.new_token_ids)
            tasks[u.request_id] = (u.task, u.frame)
    assert max(batch_mix) >= 3, f"requests of the three adapters never shared a batch: {batch_mix}"
    by_task = {t.name: t for t in TASKS}
    refs = {None: merged_reference(policy.model, None)}
    for k, w in weights.items():
        refs[k] = merged_reference(policy.model, w)
    capacity = policy.pool.capacity
    checked = 0
    for rid, (task_name, frame) in tasks.items():
        task = by_task[task_name]
        if len(texts[rid]) < task.max_new_tokens and texts[rid][-1] != policy.io.eos_id:
            continue  # still in flight
        prefix = policy.model_inputs(observations[frame])
        ids = policy._task_prompt_ids[task_name]
        want, _, _ = decode_alone(refs[None], refs[task.adapter], prefix, ids, task.max_new_tokens, policy.io.eos_id, capacity)
        assert texts[rid] == want, f"request {rid} ({task_name}, frame {frame})"
        if task.adapter is not None:  # the adapter matters: without it the request decodes otherwise
            plain, _, _ = decode_alone(refs[None], refs[None], prefix, ids, task.max_new_tokens, policy.io.eos_id, capacity)
            assert plain != want, f"adapter {task.adapter!r} does not change request {rid}'s tokens: the test is blind"
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("name", ["tiny", "xr0-tiny"])
def test_prefix_kv_is_the_base_models_bit_for_bit(name, tmp_path):
    """Every admitted request's prefix KV in the pool equals a base-model prefill of its frame (no adapter leaks
    into the prefill), while its prompt KV (written through the adapter) differs from the base's."""
    base, policy, weights = _policies(name, tmp_path)
    obs = make_obs("libero", np.random.default_rng(1))
    policy.act(obs)
    prefix = policy.model_inputs(obs)
    ref = merged_reference(policy.model, None)
    reqs = policy.engine.table.by_slot
    assert {r.task for r in reqs} == {"narrate", "memory", "plan"}
    for r in reqs:
        _, cache, state = decode_alone(ref, ref, prefix, policy._task_prompt_ids[r.task], 1, -1, policy.pool.capacity)
        n = r.prefix_len
        assert n == state.host_lengths[0]
        assert torch.equal(policy.pool.cache.k[:, r.slot, :, :n], cache.k[:, 0, :, :n]), r.task
        assert torch.equal(policy.pool.cache.v[:, r.slot, :, :n], cache.v[:, 0, :, :n]), r.task
        prompt = slice(n, n + len(policy._task_prompt_ids[r.task]) - 1)
        same = torch.equal(policy.pool.cache.k[:, r.slot, :, prompt], cache.k[:, 0, :, prompt])
        assert same == (r.adapter == 0), f"{r.task}: prompt KV through adapter slot {r.adapter}"


def test_load_and_unload_at_run_time_leave_the_pool_alone(tmp_path):
    base, policy, weights = _policies("tiny", tmp_path)
    obs = make_obs("libero", np.random.default_rng(2))
    policy.act(obs)
    pool_k = policy.pool.cache.k.clone()
    in_flight = {r.request_id: r.adapter for r in policy.engine.in_flight()}
    extra, _ = write_random_adapter(tmp_path / "extra", policy.model, ALL, rank=12, alpha=16.0, seed=9)
    policy.load_adapter("extra", extra)  # a larger rank: the bank grows, the pool is untouched
    assert torch.equal(policy.pool.cache.k, pool_k)
    assert {r.request_id: r.adapter for r in policy.engine.in_flight()} == in_flight
    with pytest.raises(AdapterError, match="in use by in-flight request"):
        policy.unload_adapter("mem")
    with pytest.raises(AdapterError, match="already loaded"):
        policy.load_adapter("extra", extra)
    policy.unload_adapter("extra")
    with pytest.raises(AdapterError, match="not loaded"):
        policy.unload_adapter("extra")
    assert torch.equal(policy.pool.cache.k, pool_k)


def test_a_task_naming_an_unloaded_adapter_is_refused():
    with pytest.raises(AdapterError, match="adapter 'mem' is not loaded"):
        MultiTaskPolicy.from_pretrained("tiny", tasks=TASKS[1:2])
    with pytest.raises(AdapterError, match="has no folder"):
        MultiTaskPolicy.from_pretrained("tiny", tasks=TASKS[:1], adapters=["mem"])


def _tokens(policy, observations):
    out = []
    for obs in observations:
        _, updates = policy.act(obs)
        out.append([(u.request_id, u.new_token_ids) for u in updates])
    return out


def test_graph_path_routes_adapters_like_the_eager_path(tmp_path, graphs_on_cpu):
    """With graphs on (captured bodies run eagerly on a CPU), mixed-adapter decode batches replay the routed static
    body and give the eager tokens; a bank that grows gets a new graph (its tensors moved)."""
    observations = [make_obs("libero", np.random.default_rng(5 + i)) for i in range(4)]
    _, graphed, _ = _policies("tiny", tmp_path)
    assert graphed.engine.runner.graphs
    got = _tokens(graphed, observations[:2])
    extra, _ = write_random_adapter(tmp_path / "extra", graphed.model, ALL, rank=12, alpha=16.0, seed=9)
    graphed.load_adapter("extra", extra)  # rank 12 > the bank's 8: its tensors are reallocated
    got += _tokens(graphed, observations[2:])
    versions = {v for _, v in graphed.engine.runner._decode_routed}
    assert len(versions) == 2, f"routed graphs by bank version: {sorted(graphed.engine.runner._decode_routed)}"
    with pytest.MonkeyPatch.context() as m:
        from oxygen_gym.engine import runner as runner_module

        m.setattr(runner_module, "use_cuda_graphs", lambda flag, device: False)
        _, eager, _ = _policies("tiny", tmp_path / "eager")
        assert not eager.engine.runner.graphs
        want = _tokens(eager, observations[:2])
        eager.load_adapter("extra", extra)
        want += _tokens(eager, observations[2:])
    assert got == want
