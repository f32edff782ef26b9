"""Seeds derived from numpy's SeedSequence are the same Python ints on every numpy the package allows (>=1.26).

numpy 1.x promotes `np.uint64 >> int` to float64, where `>>` raises TypeError: every `act()` failed on numpy 1.26
(issue 25). The values below are numpy 2's; `make test-min` runs this file on numpy 1.26.
"""
import numpy as np

from oxygen_gym.policies.multitask import _seed_for, head_noise_seed


def test_seeds_are_python_ints_with_the_same_values_on_numpy_1_and_2():
    got = [_seed_for(0, 0, 1), _seed_for(7, 123, 4_000_000_000), head_noise_seed(0, 5, "actions")]
    assert got == [4324601099084218337, 1911687203425490501, 590479522151301346], np.__version__
    assert all(type(s) is int and 0 <= s < 2**63 for s in got)
