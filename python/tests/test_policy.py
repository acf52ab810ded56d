"""The online API: every registry kind from Python, errors, snapshot/restore and pickling."""

import json
import pathlib
import pickle
import tomllib

import numpy as np
import pytest

import dpbandits

K = 4
D = 3


def setting_args(setting, rng):
    if setting == "finite_armed":
        return {"arms": K}
    if setting == "linear":
        return {"arms": rng.normal(size=(6, D)) / np.sqrt(D)}
    if setting == "contextual":
        return {"dim": D, "horizon": 400}
    if setting == "bai":
        return {"arms": K, "delta": 0.05}
    raise AssertionError(setting)


def make(entry, seed=1, **extra):
    rng = np.random.default_rng(0)
    params = tomllib.loads(entry["example"])
    params.update(setting_args(entry["setting"], rng))
    params.update(extra)
    return dpbandits.Policy(entry["kind"], seed=seed, **params)


def play(p, steps, rng, actions_rng=None):
    """Play `steps` rounds with Bernoulli(0.5 + 0.1 * arm / K) rewards; return the choices."""
    out = []
    for _ in range(steps):
        if p.setting == "contextual":
            a = actions_rng.normal(size=(5, D)) / np.sqrt(D)
            arm = p.choose(a)
        else:
            arm = p.choose()
        if arm is None:  # BAI stopped
            out.append(-1)
            break
        out.append(arm)
        p.observe(arm, float(rng.random() < 0.4 + 0.1 * (arm % K)))
    return out


KINDS = dpbandits.kinds()


def test_registry_is_not_empty():
    settings = {e["setting"] for e in KINDS}
    assert settings == {"finite_armed", "linear", "contextual", "bai"}, settings
    assert len(KINDS) >= 25


@pytest.mark.parametrize("entry", KINDS, ids=[e["kind"] for e in KINDS])
def test_every_kind_constructs_and_plays(entry):
    p = make(entry)
    assert p.kind == entry["kind"]
    g = p.guarantee
    assert isinstance(g, dict) and "noise" in g and "notion" in g
    choices = play(p, 50, np.random.default_rng(1), np.random.default_rng(2))
    assert len(choices) >= 1
    assert all(-1 <= c for c in choices)
    if entry["setting"] == "bai":
        assert 0 <= p.recommend() < K
        assert isinstance(p.stopped, bool)


@pytest.mark.parametrize("entry", KINDS, ids=[e["kind"] for e in KINDS])
def test_snapshot_pickle_continue_bit_identically(entry):
    p = make(entry, seed=11)
    play(p, 60, np.random.default_rng(3), np.random.default_rng(4))
    snap = p.snapshot()
    q = dpbandits.Policy.restore(snap)
    r = pickle.loads(pickle.dumps(p))
    assert q.t == p.t == r.t
    a = play(p, 120, np.random.default_rng(5), np.random.default_rng(6))
    b = play(q, 120, np.random.default_rng(5), np.random.default_rng(6))
    c = play(r, 120, np.random.default_rng(5), np.random.default_rng(6))
    assert a == b == c
    # The final states agree too (same snapshot bytes).
    assert p.snapshot() == q.snapshot() == r.snapshot()


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="rho"):
        dpbandits.Policy("adac_ucb", arms=5, rho=-1.0)
    with pytest.raises(ValueError, match="rho"):
        dpbandits.Policy("adac_ucb", arms=5)  # a private kind needs its budget
    with pytest.raises(ValueError, match="kind"):
        dpbandits.Policy("no_such_kind", arms=5)
    with pytest.raises(ValueError, match="rhoo"):
        dpbandits.Policy("adac_ucb", arms=5, rho=1.0, rhoo=2.0)
    with pytest.raises(ValueError, match="arms"):
        dpbandits.Policy("ucb1")
    with pytest.raises(ValueError, match="epsilon"):
        dpbandits.Policy("dp_se", arms=3, epsilon="high", beta=0.001)
    with pytest.raises(ValueError, match="delta"):
        dpbandits.Policy("dp_tt", arms=3, epsilon=1.0)
    with pytest.raises(ValueError, match="dim"):
        dpbandits.Policy("oful", horizon=10)


def test_protocol_and_boundary_errors_leave_the_policy_unchanged():
    p = dpbandits.Policy("adac_ucb", arms=3, rho=1.0, seed=3)
    arm = p.choose()
    before = p.snapshot()
    with pytest.raises(ValueError):
        p.observe((arm + 1) % 3, 1.0)  # another arm than the chosen one
    with pytest.raises(ValueError):
        p.observe(arm, float("nan"))
    assert p.snapshot() == before
    p.observe(arm, 1.0)
    assert p.t == 1
    with pytest.raises(ValueError, match="actions"):
        p.choose(np.zeros((2, 2)))


def test_deployment_grade_policy_pickles_and_continues_with_fresh_noise():
    """A deployment-grade policy snapshots its statistics and cached releases, not its OS-keyed
    generator (privacy/noise.rs): the restored copy draws fresh noise and keeps its grade."""
    p = dpbandits.Policy("adac_ucb", arms=3, rho=1.0, noise="deployment", seed=1)
    assert p.guarantee["noise"] == "deployment-grade"
    for _ in range(200):
        arm = p.choose()
        p.observe(arm, 1.0 if arm == 0 else 0.0)
    q = pickle.loads(pickle.dumps(p))
    assert q.guarantee == p.guarantee
    assert q.t == p.t == 200
    for _ in range(200):
        arm = q.choose()
        q.observe(arm, 1.0 if arm == 0 else 0.0)
    assert q.t == 400


def test_restore_refuses_garbage():
    with pytest.raises(ValueError):
        dpbandits.Policy.restore(b"not a snapshot")


@pytest.mark.parametrize(
    "kind,params",
    [("eb_tci", {}), ("dp_tt", {"epsilon": 10.0}), ("dp_se_bai", {"epsilon": 10.0})],
)
def test_bai_runs_to_a_recommendation(kind, params):
    """Requests of n samples are served one sample at a time (buffered, observed as one sum)."""
    p = dpbandits.Policy(kind, arms=3, delta=0.05, seed=2, **params)
    rng = np.random.default_rng(9)
    means = [0.9, 0.5, 0.3]
    for _ in range(300_000):
        arm = p.choose()
        if arm is None:
            break
        p.observe(arm, float(rng.random() < means[arm]))
    assert p.stopped, p.t
    assert p.recommend() == 0
    assert p.t > 20  # it sampled before stopping
    with pytest.raises(ValueError):
        p.observe(0, 1.0)  # no open request after the stop


def test_contextual_choose_twice_is_a_protocol_error_and_changes_nothing():
    """The round's reward comes before the next round (the core session's protocol order; the
    binding used to let a second `choose` replace the first)."""
    p = dpbandits.Policy("oful", dim=D, horizon=100, seed=1)
    a = np.eye(D)
    arm = p.choose(a)
    before = p.snapshot()
    with pytest.raises(ValueError, match="observe"):
        p.choose(a)
    assert p.snapshot() == before
    p.observe(arm, 1.0)
    assert p.t == 1 and p.choose(a) in range(D)


def test_finite_choose_again_within_a_commitment():
    """An episodic kind commits to several rounds of one arm: `choose` may be called again
    within the commitment before the rewards arrive (they then arrive one per round); past the
    commitment's last round it waits for them."""
    p = dpbandits.Policy("adac_ucb", arms=3, rho=1.0, seed=2)
    for _ in range(400):
        arm = p.choose()
        p.observe(arm, 1.0 if arm == 0 else 0.0)
    arm, n = p.choose(), 1
    while True:
        try:
            assert p.choose() == arm
            n += 1
        except ValueError as e:
            assert "pending" in str(e)
            break
    assert n >= 2, "no commitment of several rounds after 400 rounds"
    for _ in range(n):
        p.observe(arm, 0.5)
    assert p.t == 400 + n


# Snapshots and pickles written by the binding before it held a core session
# (`dpbandits-python-policy` version 1; fixtures/make_legacy_policies.py), with the decisions that
# binding made after them.
LEGACY = json.loads((pathlib.Path(__file__).parent / "fixtures" / "legacy_policies.json").read_text())
LEGACY_MEANS = [0.9, 0.4, 0.2, 0.7, 0.6]


def legacy_reward(t, arm):
    h = (t * 2654435761 + arm * 97531 + 12345) % 2**32
    return float((h >> 8) % 1000 < LEGACY_MEANS[arm % len(LEGACY_MEANS)] * 1000)


def legacy_actions(t):
    return np.random.default_rng(1000 + t).normal(size=(5, D)) / np.sqrt(D)


def legacy_play(p, rounds):
    out = []
    for _ in range(rounds):
        arm = p.choose(legacy_actions(p.t) if p.setting == "contextual" else None)
        out.append(arm)
        if arm is None:
            break
        p.observe(arm, legacy_reward(p.t, arm))
    return out


def buffered_rewards(snapshot: bytes) -> bool:
    """Whether an old BAI snapshot holds an open request with rewards already observed."""
    i = snapshot.find(b"gpending\x83")
    if i < 0:
        return False
    j = i + len(b"gpending\x83") + 1  # the arm (< 24: one byte)
    head = snapshot[j]
    j += {0x18: 2, 0x19: 3, 0x1A: 5}.get(head, 1)  # n
    return snapshot[j] != 0x80  # a non-empty array of rewards


@pytest.mark.parametrize("case", LEGACY["cases"], ids=[c["name"] for c in LEGACY["cases"]])
def test_legacy_snapshots_and_pickles_continue(case):
    for p in (
        dpbandits.Policy.restore(bytes.fromhex(case["snapshot"])),
        pickle.loads(bytes.fromhex(case["pickle"])),
    ):
        assert p.kind == case["kind"] and p.t == case["t"] and p.stopped == case["stopped"]
        assert p.guarantee == case["guarantee"]
        if "recommend" in case:
            assert p.recommend() == case["recommend"]
        if case["pending"]:
            # A contextual round chosen but not observed is dropped with its action set: the
            # restored policy waits for the round's actions again.
            with pytest.raises(ValueError, match="decide first"):
                p.observe(0, 1.0)
            assert legacy_play(p, 20) and p.t == case["t"] + 20
        elif case["stopped"]:
            # The stop is kept (the old binding asked the algorithm again, which sampled on)
            assert legacy_play(p, 10) == [None] and p.choose() is None
        else:
            assert legacy_play(p, len(case["after"])) == case["after"], case["name"]
        # and it snapshots in the current (session) format
        q = dpbandits.Policy.restore(p.snapshot())
        assert q.t == p.t


def test_legacy_bai_snapshots_cover_open_requests():
    bai = [c for c in LEGACY["cases"] if c["kind"] == "dp_tt" and not c["stopped"]]
    assert sum(buffered_rewards(bytes.fromhex(c["snapshot"])) for c in bai) >= 2


def test_restore_names_an_unknown_snapshot_version():
    snap = bytes.fromhex(LEGACY["cases"][0]["snapshot"])
    newer = snap.replace(b"gversion\x01", b"gversion\x02", 1)
    assert newer != snap
    with pytest.raises(ValueError, match="version = 2"):
        dpbandits.Policy.restore(newer)
    p = dpbandits.Policy("adac_ucb", arms=3, rho=1.0)
    session = p.snapshot().replace(b"gversion\x01", b"gversion\x09", 1)
    with pytest.raises(ValueError, match="version = 9"):
        dpbandits.Policy.restore(session)


def test_restore_checks_t_against_a_session_snapshot():
    p = dpbandits.Policy("ucb1", arms=3, seed=1)
    play(p, 10, np.random.default_rng(0))
    assert dpbandits.Policy.restore(p.snapshot(), t=10).t == 10
    with pytest.raises(ValueError, match="t = 9"):
        dpbandits.Policy.restore(p.snapshot(), t=9)
    with pytest.raises(ValueError):
        dpbandits.Policy.restore(b"\xa1fformatxnot-a-format")


def test_problem_arguments_as_integral_floats_and_lists():
    """The keyword arguments are the session's table: counts may be integral floats, linear arm
    vectors a list of lists; anything else names the field."""
    a = dpbandits.Policy("adac_ucb", arms=4.0, rho=1.0, seed=1)
    b = dpbandits.Policy("adac_ucb", arms=4, rho=1.0, seed=1)
    assert play(a, 30, np.random.default_rng(0)) == play(b, 30, np.random.default_rng(0))
    assert dpbandits.Policy("oful", dim=3.0, horizon=1e4).t == 0
    with pytest.raises(ValueError, match=r"^arms = 4\.5: expected"):
        dpbandits.Policy("adac_ucb", arms=4.5, rho=1.0)
    vecs = [[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]
    p = dpbandits.Policy("lin_ucb", arms=vecs, seed=2)
    q = dpbandits.Policy("lin_ucb", arms=np.array(vecs), seed=2)
    assert play(p, 40, np.random.default_rng(1)) == play(q, 40, np.random.default_rng(1))
    with pytest.raises(ValueError, match=r"arms\[1\]"):
        dpbandits.Policy("lin_ucb", arms=[[1.0, 0.0], [0.0]])
    with pytest.raises(ValueError, match=r"arms\[0\]\[1\]"):
        dpbandits.Policy("lin_ucb", arms=[[1.0, float("nan")], [0.0, 1.0]])
