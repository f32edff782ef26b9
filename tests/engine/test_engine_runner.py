"""The model runner's graph path on a CPU: everything a CUDA-graph frame does except the capture itself.

With graphs on, the runner pads decode batches to buckets, runs the model's own calls in shape-static form from
fixed buffers, copies a frame's prefix into the staging row before a denoise replay, and captures lazily on the
first call of each shape with that call's real inputs. Here `StaticCall.capture` / `replay` are replaced by the
static body run eagerly (the warm-up a capture runs, and what the graph would replay), so those mechanics run through the scheduler in every mode
and must give the eager path's tokens, and its actions to float tolerance.
"""
import pytest
import torch

from engine_workloads import make_workload, run_workload
from oxygen_gym.engine import runner as runner_module
from oxygen_gym.model import build_model


@pytest.fixture(scope="module")
def tiny():
    return build_model("tiny", seed=3)




@pytest.mark.parametrize("mode", ["isolated", "shared", "oxygen"])
def test_graph_path_gives_the_eager_tokens_and_actions(tiny, mode, graphs_on_cpu):
    workload = make_workload(21, frames=10, max_tasks=3)
    graph_tokens, graph_actions, sched = run_workload(tiny, mode, workload, k=2, num_slots=8)
    assert sched.runner.graphs and graphs_on_cpu["replayed"] > 0
    decode_keys = sorted(sched.runner._decode)
    assert set(decode_keys) <= set(sched.runner.buckets) and graphs_on_cpu["captured"] == len(decode_keys) + 1
    with pytest.MonkeyPatch.context() as m:  # the same workload, eager
        m.setattr(runner_module, "use_cuda_graphs", lambda flag, device: False)
        eager_tokens, eager_actions, _ = run_workload(tiny, mode, workload, k=2, num_slots=8)
    assert graph_tokens == eager_tokens
    for a, b in zip(graph_actions, eager_actions):
        # measured max abs difference of the static denoise body 1.7e-6 (tools/measure_test_errors.py kernels); ~3x
        torch.testing.assert_close(a, b, atol=5e-6, rtol=0)


def _robots(model, frames: int, ks: list[int]):
    """Three robots' frames through one BatchScheduler, each robot with its own k (so later decode steps batch a
    subset of the live requests); returns ({(robot, request id): tokens}, [actions per batch], the live slots' KV)."""
    from oxygen_gym.engine.batch import BatchScheduler
    from oxygen_gym.engine.frame import FrameInput
    from oxygen_gym.engine.request import Request
    from oxygen_gym.engine.slots import SlotPool

    kv = model.kv_layout
    pool = SlotPool(12, 800, layers=kv.layers, kv_heads=kv.kv_heads, head_dim=kv.head_dim, scratch_rows=3)
    sched = BatchScheduler(model, pool)
    workloads = [make_workload(40 + s, frames=frames, max_tasks=2) for s in range(3)]
    tokens: dict[tuple[int, int], list[int]] = {}
    actions, ids = [], [0, 0, 0]
    for f in range(frames):
        batch = []
        for s, workload in enumerate(workloads):
            prefix, noise, arrivals = workload[f]
            reqs = [Request(ids[s] + i, t, f, list(p), max_new_tokens=n, eos_id=1, session=s) for i, (t, p, n) in enumerate(arrivals)]
            ids[s] += len(reqs)
            batch.append(FrameInput(f, prefix, noise, reqs, session=s))
        for s, res in enumerate(sched.run_batch(batch, ks)):
            actions.append(res.actions)
            for r, new in res.advanced:
                tokens.setdefault((s, r.request_id), []).extend(new)
    live = {(r.session, r.request_id): (pool.cache.k[:, r.slot, :, : r.length].clone(), pool.cache.v[:, r.slot, :, : r.length].clone())
            for r in sched.table.by_slot}
    return tokens, actions, live


def test_graph_path_of_multi_robot_batches_gives_the_eager_results(tiny, graphs_on_cpu):
    """Robots with different k: a decode step over some robots' requests is not the whole active range, so it must
    not be padded over the others' live rows (whose KV must come out as the eager run leaves it)."""
    graph_tokens, graph_actions, graph_kv = _robots(tiny, frames=6, ks=[1, 3, 2])
    assert graphs_on_cpu["replayed"] > 0
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runner_module, "use_cuda_graphs", lambda flag, device: False)
        eager_tokens, eager_actions, eager_kv = _robots(tiny, frames=6, ks=[1, 3, 2])
    assert graph_tokens == eager_tokens
    for a, b in zip(graph_actions, eager_actions):
        torch.testing.assert_close(a, b, atol=5e-6, rtol=0)
    assert graph_kv.keys() == eager_kv.keys() and graph_kv
    for key, (k, v) in graph_kv.items():
        # K/V of decoded tokens come from the static (full-capacity) step: measured max abs 3.3e-6; ~3x
        torch.testing.assert_close(k, eager_kv[key][0], atol=1e-5, rtol=0, msg=f"K of request {key}")
        torch.testing.assert_close(v, eager_kv[key][1], atol=1e-5, rtol=0, msg=f"V of request {key}")
