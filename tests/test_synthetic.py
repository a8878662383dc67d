"""Simulator: determinism, shapes, and that the ground truth is visible in the data."""

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from kt_lib.data.synthetic import EMISSIONS, simulate


def _stack(res, attr: str) -> np.ndarray:
    """[N, L] array of one field (all students the same length)."""
    return np.stack([getattr(s, attr) for s in res.data.students])


@pytest.fixture(scope="module")
def default_sim():
    return simulate(seed=0)


def test_same_seed_same_data_other_seed_differs():
    a, b, c = (simulate(200, 40, K=3, seed=s) for s in (7, 7, 8))
    for f in ("q", "r", "pid"):
        assert np.array_equal(_stack(a, f), _stack(b, f))
    for name, value in vars(a.truth).items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, getattr(b.truth, name)), name
    assert not np.array_equal(_stack(a, "r"), _stack(c, "r"))
    assert not np.array_equal(a.truth.beta, c.truth.beta)


def test_skill_parameters_do_not_depend_on_number_of_students():
    small, large = simulate(50, 20, seed=1), simulate(300, 20, seed=1)
    assert np.array_equal(small.truth.beta, large.truth.beta)
    assert np.array_equal(small.truth.arch_T, large.truth.arch_T)


@pytest.mark.parametrize("emission", sorted(EMISSIONS))
@pytest.mark.parametrize("K", [2, 4])
def test_shapes_ranges_and_vocabulary(emission, K):
    N, L, C, per = 120, 30, 7, 3
    res = simulate(N, L, C, per, num_archetypes=3, K=K, emission=emission, min_len=10, seed=2)
    data, t = res.data, res.truth
    assert (data.name, data.num_c, data.num_pid, data.K) == ("synthetic", C, C * per, K)
    assert data.has_pid and np.array_equal(data.uids, np.arange(N))
    lengths = np.array([len(s) for s in data.students])
    assert np.array_equal(lengths, t.lengths)
    assert lengths.min() >= 10 and lengths.max() <= L and len(np.unique(lengths)) > 1
    for s in data.students:
        assert len(s.q) == len(s.r) == len(s.pid)
        assert s.q.min() >= 0 and s.q.max() < C
        assert s.pid.min() >= 0 and s.pid.max() < C * per
        assert set(np.unique(s.r)) <= set(range(K))
        assert np.array_equal(t.pid_skill[s.pid], s.q)  # each problem belongs to its step's skill
    assert t.archetype.shape == t.theta.shape == (N,)
    assert t.archetype.min() >= 0 and t.archetype.max() < 3
    assert t.beta.shape == t.L0.shape == t.T.shape == t.guess.shape == t.slip.shape == (C,)
    assert t.pid_offset.shape == t.pid_skill.shape == (C * per,)
    assert t.arch_L0.shape == t.arch_T.shape == (3, C) and len(t.arch_names) == 3
    assert t.mastery.shape == t.expected.shape == (N, L) and t.mastery.dtype == bool
    assert ((t.arch_L0 > 0) & (t.arch_L0 < 1) & (t.arch_T > 0) & (t.arch_T < 1)).all()
    assert (t.guess >= 0.1).all() and (t.guess <= 0.3).all()
    assert (t.slip >= 0.05).all() and (t.slip <= 0.2).all()
    assert (t.L0 >= 0.1).all() and (t.L0 <= 0.6).all()
    assert (t.T >= 0.05).all() and (t.T <= 0.3).all()
    if K == 2:
        assert t.gpcm_alpha is None and t.gpcm_thresholds is None
    else:
        assert t.gpcm_alpha.shape == (C,) and t.gpcm_thresholds.shape == (C, K - 1)


@pytest.mark.parametrize("emission", sorted(EMISSIONS))
def test_responses_follow_expected_and_mastery_grows(emission):
    res = simulate(1000, 80, emission=emission, seed=3)
    r, t = _stack(res, "r"), res.truth
    assert abs(r.mean() - t.expected.mean()) < 0.01
    quarter = r.shape[1] // 4
    assert r[:, -quarter:].mean() > r[:, :quarter].mean() + 0.01
    assert t.mastery[:, -quarter:].mean() > t.mastery[:, :quarter].mean() + 0.03
    # mastery never reverts: once the practised skill is mastered, later practice of it stays so
    q = _stack(res, "q")
    for c in range(3):
        m = np.where(q == c, t.mastery, False)
        first = np.where(m.any(1), m.argmax(1), r.shape[1])
        later = (np.arange(r.shape[1]) >= first[:, None]) & (q == c)
        assert t.mastery[later].all()


def test_default_mean_correctness_and_archetypes(default_sim):
    frame = default_sim.to_frame()
    assert list(frame.columns[:3]) == ["uid", "archetype", "arch_name"]
    assert 0.6 <= _stack(default_sim, "r").mean() <= 0.7
    by_arch = frame.groupby("archetype").mean_response.mean()
    assert len(by_arch) == 4 and by_arch.max() - by_arch.min() > 0.1


def test_hybrid_ability_and_difficulty_are_visible(default_sim):
    frame = default_sim.to_frame()
    assert pearsonr(frame.mean_response, frame.theta)[0] > 0.5
    skills = default_sim.skills_frame()
    assert pearsonr(skills.mean_response, -default_sim.truth.beta)[0] > 0.7


def test_bkt_first_attempt_matches_population_parameters():
    res = simulate(4000, 100, num_archetypes=1, emission="bkt", seed=4)
    t = res.truth
    assert np.array_equal(t.arch_L0[0], t.L0) and np.array_equal(t.arch_T[0], t.T)
    hits = np.zeros(res.data.num_c)
    tries = np.zeros(res.data.num_c)
    for s in res.data.students:
        skills, first = np.unique(s.q, return_index=True)
        hits[skills] += s.r[first]
        tries[skills] += 1
    assert tries.min() > 1000
    expected = t.L0 * (1 - t.slip) + (1 - t.L0) * t.guess
    assert np.abs(hits / tries - expected).max() < 0.05


def test_ordinal_gpcm_mode():
    res = simulate(800, 60, K=4, seed=5)
    t = res.truth
    r = _stack(res, "r")
    assert set(np.unique(r)) == {0, 1, 2, 3}
    assert (np.diff(t.gpcm_thresholds, axis=1) > 0).all() and (t.gpcm_alpha > 0).all()
    assert abs(r.mean() - t.expected.mean()) < 0.03
    assert spearmanr(res.to_frame().mean_response, t.theta)[0] > 0.5


def test_bad_arguments_raise():
    with pytest.raises(KeyError, match="hybrid"):
        simulate(10, 5, emission="nope")
    with pytest.raises(ValueError, match="min_len"):
        simulate(10, 5, min_len=6)
    with pytest.raises(ValueError, match="K"):
        simulate(10, 5, K=1)
    with pytest.raises(ValueError, match="num_students"):
        simulate(0, 5)
    with pytest.raises(TypeError, match=r"K must be an integer >= 2, got None"):
        simulate(10, 5, K=None)
    with pytest.raises(TypeError, match=r"seq_len must be an integer >= 1, got 5.5"):
        simulate(10, 5.5)


def test_load_bundle_names_a_missing_K():
    # was a bare "'<' not supported between NoneType and int" from deep inside the simulator
    from kt_lib.data.formats.bundle import load_bundle

    with pytest.raises(TypeError, match="K must be an integer"):
        load_bundle(K=None)
