"""The thread-placement rule (oxygen_gym/engine/placement.py): given cores, processes and a simulator in the process,
the threads, wait policy and renderer threads chosen; explicit counts win."""
import json
import os
import subprocess
import sys

import pytest

from oxygen_gym.engine.placement import Placement, choose, prepare_environment


@pytest.mark.parametrize("cores, processes, simulator, threads, wait, renderer", [
    (2, 1, False, 1, "PASSIVE", 2),   # a 2-core machine: one thread (measured: two collapse beside any other work)
    (2, 2, True, 1, "PASSIVE", 1),    # two eval workers with simulators on 2 cores
    (16, 1, False, 16, "ACTIVE", 16),  # a dedicated machine: every core, torch's spinning wait
    (16, 1, True, 15, "PASSIVE", 16),  # a simulator in the process keeps a core
    (16, 4, True, 3, "PASSIVE", 4),    # four eval workers: 4 cores each, one left to the simulator
    (16, 4, False, 4, "PASSIVE", 4),   # four serving processes
    (3, 2, False, 1, "PASSIVE", 1),    # the remainder core is nobody's
])
def test_the_rule(cores, processes, simulator, threads, wait, renderer):
    p = choose(cores, processes=processes, simulator=simulator, env={})
    assert (p.threads, p.wait_policy, p.renderer_threads, p.source) == (threads, wait, renderer, "rule")


def test_an_explicit_count_wins_and_is_recorded():
    assert choose(16, threads=3, env={}).threads == 3 and choose(16, threads=3, env={}).source == "flag"
    assert choose(16, env={"OMP_NUM_THREADS": "5"}).threads == 5 and choose(16, env={"OMP_NUM_THREADS": "5"}).source == "env"
    assert choose(16, threads=2, env={"OMP_NUM_THREADS": "5"}).threads == 2  # the flag over the environment
    assert choose(16, env={"OMP_NUM_THREADS": "junk"}).source == "rule"


@pytest.mark.parametrize("kwargs", [dict(cores=0), dict(cores=2, processes=0), dict(cores=2, threads=0)])
def test_bad_arguments_name_what_was_expected(kwargs):
    cores = kwargs.pop("cores")
    with pytest.raises(ValueError, match=">= 1"):
        choose(cores, **kwargs)


def test_the_environment_keeps_what_the_user_set():
    p = choose(2, simulator=True, env={})
    assert prepare_environment(p, {}) == {"OMP_WAIT_POLICY": "PASSIVE", "LP_NUM_THREADS": "2"}
    assert prepare_environment(p, {"OMP_WAIT_POLICY": "ACTIVE"})["OMP_WAIT_POLICY"] == "ACTIVE"


def test_place_sets_torch_threads_and_says_whether_the_wait_policy_took_effect():
    code = ("import json, os; from oxygen_gym.engine.placement import place; p = place(); import torch; "
            "print(json.dumps([p.threads, torch.get_num_threads(), p.applied, os.environ.get('OMP_WAIT_POLICY')]))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, check=True)
    threads, torch_threads, applied, wait = json.loads(out.stdout.strip().splitlines()[-1])
    assert threads == torch_threads >= 1
    assert applied is True and (wait == "PASSIVE") == (choose(len(os.sched_getaffinity(0)), env={}).wait_policy == "PASSIVE")
    late = subprocess.run([sys.executable, "-c", "import torch; " + code], capture_output=True, text=True, env=env,
                          timeout=120, check=True)
    if choose(len(os.sched_getaffinity(0)), env={}).wait_policy == "PASSIVE":
        assert json.loads(late.stdout.strip().splitlines()[-1])[2] is False  # torch loaded OpenMP first: not applied


def test_a_placement_is_a_flat_record():
    rec = choose(4, env={}).as_record()
    assert set(rec) == {f for f in Placement.__dataclass_fields__} and all(not isinstance(v, dict) for v in rec.values())


def test_parallel_mode_sizes_its_two_workers_by_the_rule():
    from oxygen_gym import MultiTaskPolicy
    from oxygen_gym.engine.placement import available_cores

    with MultiTaskPolicy.from_pretrained("tiny", robot="libero", mode="parallel") as policy:
        placement = policy.engine.placement
    assert placement == choose(available_cores(), processes=2)
    assert placement.processes == 2 and placement.wait_policy == "PASSIVE"
