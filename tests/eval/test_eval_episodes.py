"""The episode set and its `--shard i/n` partition."""
import pytest
from oxygen_gym.eval.libero.episode_set import (
    SUITES,
    EpisodeSpec,
    build_episode_set,
    parse_seeds,
    parse_shard,
    parse_suites,
    parse_tasks,
    shard,
)


def test_all_suites_in_table_order_and_aliases():
    assert parse_suites("all") == list(SUITES) == ["libero_spatial", "libero_object", "libero_goal", "libero_10"]
    assert parse_suites("10,spatial") == ["libero_spatial", "libero_10"]
    assert parse_suites(["libero_goal", "object"]) == ["libero_object", "libero_goal"]


@pytest.mark.parametrize("bad", ["libero_99", "spatal", ""])
def test_unknown_suite_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="--suite"):
        parse_suites(bad)


def test_task_and_seed_lists():
    assert parse_tasks(None) is None and parse_tasks("all") is None
    assert parse_tasks("3,0-2") == [0, 1, 2, 3]
    assert parse_seeds("7,8,9") == [7, 8, 9]
    for bad in ["10", "0,0", "x", "5-2", "-1"]:
        with pytest.raises(ValueError, match="--tasks"):
            parse_tasks(bad)
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("a")


def test_episode_set_is_the_full_cross_product():
    specs = build_episode_set(["libero_spatial", "libero_10"], [0, 4], 3, [7, 8])
    assert len(specs) == 2 * 2 * 3 * 2 == len(set(specs))
    assert specs[0] == EpisodeSpec("libero_spatial", 0, 7, 0)
    assert {s.init_state for s in specs} == {0, 1, 2}
    assert len(build_episode_set(["all"], None, 50, [7])) == 4 * 10 * 50
    with pytest.raises(ValueError, match="--episodes"):
        build_episode_set(["libero_spatial"], None, 51, [7])


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_cover_every_episode_exactly_once(n):
    specs = build_episode_set(["all"], [0, 3, 9], 5, [7, 8])
    parts = [shard(specs, i, n) for i in range(n)]
    flat = [s for p in parts for s in p]
    assert sorted(flat) == sorted(specs) and len(flat) == len(set(flat))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1  # balanced
    # deterministic and independent of the order the set was built in
    assert shard(list(reversed(specs)), n - 1, n) == parts[n - 1]
    if n > 1:  # round robin gives every shard a share of every suite
        assert all({s.suite for s in p} == set(SUITES) for p in parts)


def test_parse_shard():
    assert parse_shard("2/3") == (2, 3) and parse_shard(None) == (0, 1)
    for bad in ["3/3", "1", "a/b", "0/0", "-1/2"]:
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
