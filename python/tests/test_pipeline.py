"""Decisions while outcomes are pending (`Policy(..., while_pending="pipeline")`): every setting
serves decisions with no reward in, takes their rewards by decision id in any order (each once),
pickles mid-flight and continues identically; and a pipelined Python session makes the decision
service's decisions, decision by decision, with rewards arriving out of order."""

import math
import pickle
import random

import numpy as np
import pytest

import dpbandits
from dpbandits import Decision

# The decision service's fixture (a real `dpbandits serve` on 127.0.0.1, stopped by the test).
from test_service_client import ADMIN, server  # noqa: F401

D = 3

# One kind of each setting with its problem (and a boundary that refuses out-of-range rewards
# where the kind has one).
CASES = {
    "dp_ts": {"arms": 3, "epsilon": 1.0, "boundary": "reject"},
    "adac_gope": {
        "arms": (np.random.default_rng(5).normal(size=(5, D)) / np.sqrt(D)).tolist(),
        "rho": 1.0,
        "delta": 0.001,
    },
    "adac_oful": {"dim": D, "horizon": 400, "rho": 1.0},
    "dp_tt": {"arms": 3, "delta": 0.05, "epsilon": 10.0},
}


def make(kind, seed=7, **extra):
    return dpbandits.Policy(kind, seed=seed, while_pending="pipeline", **CASES[kind], **extra)


def actions_for(p, rng):
    return rng.normal(size=(4, D)) / np.sqrt(D) if p.setting == "contextual" else None


def reward_of(decision_id, arm):
    """A deterministic reward in [0, 1] of a decision (its id and arm)."""
    return float((decision_id * 7 + arm) % 3 == 0)


@pytest.mark.parametrize("kind", list(CASES))
def test_pipeline_serves_100_decisions_then_takes_the_rewards_in_reverse(kind):
    p = make(kind)
    assert p.while_pending == "pipeline" and p.pending == []
    rng = np.random.default_rng(1)
    decisions = [p.decide(actions_for(p, rng)) for _ in range(100)]
    assert all(isinstance(d, Decision) for d in decisions)
    assert [d.decision_id for d in decisions] == list(range(1, 101))
    assert p.pending == list(range(1, 101)) and p.t == 0
    for decision_id, arm in reversed(decisions):
        p.observe_decision(decision_id, reward_of(decision_id, arm))
    assert p.pending == [] and p.t == 100
    # It goes on deciding (ids continue) from what it received.
    d = p.decide(actions_for(p, rng))
    assert d is not None and d.decision_id == 101 and p.pending == [101]


@pytest.mark.parametrize("kind", list(CASES))
def test_a_decision_observed_twice_or_never_issued_is_refused_naming_it(kind):
    p = make(kind)
    rng = np.random.default_rng(2)
    for _ in range(5):
        p.decide(actions_for(p, rng))
    p.observe_decision(3, 1.0)
    before = p.snapshot()
    with pytest.raises(ValueError, match=r"^decision_id = 3: .*already observed"):
        p.observe_decision(3, 1.0)
    with pytest.raises(ValueError, match=r"^decision_id = 6: .*not issued \(5 so far\)"):
        p.observe_decision(6, 1.0)
    with pytest.raises(ValueError, match=r"^decision_id = 0: "):
        p.observe_decision(0, 1.0)
    with pytest.raises(ValueError, match="decision_id"):
        p.observe_decision(-1, 1.0)
    with pytest.raises(TypeError, match="decision_id"):
        p.observe_decision("2", 1.0)
    with pytest.raises(ValueError, match="reward"):
        p.observe_decision(2, math.nan)
    with pytest.raises(TypeError, match="reward"):
        p.observe_decision(2, "1.0")
    assert p.snapshot() == before and p.pending == [1, 2, 4, 5]
    if "boundary" in CASES[kind]:
        with pytest.raises(ValueError, match="reward"):
            p.observe_decision(2, 1.5)
        assert p.snapshot() == before
    p.observe_decision(2, 0.0)
    assert p.pending == [1, 4, 5]


@pytest.mark.parametrize("kind", list(CASES))
def test_a_pickle_mid_flight_continues_identically(kind):
    p = make(kind)
    rng = np.random.default_rng(3)
    order = random.Random(4)
    issued = [p.decide(actions_for(p, rng)) for _ in range(40)]
    # Half the rewards in, out of order.
    for d in order.sample(issued, 20):
        p.observe_decision(d.decision_id, reward_of(*d))
    q = pickle.loads(pickle.dumps(p))
    assert q.while_pending == "pipeline" and q.pending == p.pending and q.t == p.t == 20
    assert q.snapshot() == p.snapshot()
    r = dpbandits.Policy.restore(p.snapshot())
    assert r.pending == p.pending
    # Both go on alike: more decisions with rewards trickling in out of order.
    arms = {d.decision_id: d.arm for d in issued}
    rng_q = np.random.default_rng(33)
    rng_p = np.random.default_rng(33)
    for step in range(60):
        a, b = p.decide(actions_for(p, rng_p)), q.decide(actions_for(q, rng_q))
        assert a == b, f"{kind}: step {step}: {a} != {b}"
        arms[a.decision_id] = a.arm
        if step % 2:
            pend = p.pending
            i = pend[(step * 5) % len(pend)]
            p.observe_decision(i, reward_of(i, arms[i]))
            q.observe_decision(i, reward_of(i, arms[i]))
    assert p.pending == q.pending and p.snapshot() == q.snapshot()


def test_while_pending_is_checked_and_not_a_kind_parameter():
    p = dpbandits.Policy("dp_ts", arms=3, epsilon=1.0)
    assert p.while_pending == "wait"
    d = p.decide()
    assert d == (1, d.arm)  # a named tuple: it unpacks
    decision_id, arm = d
    with pytest.raises(ValueError, match="pending"):
        p.decide()  # wait mode: a per-step kind decides after the reward
    p.observe_decision(decision_id, 1.0)
    assert p.choose() in (0, 1, 2) and p.pending == [2]
    for bad in ["later", "Pipeline", 3]:
        with pytest.raises(ValueError) as e:
            dpbandits.Policy("dp_ts", arms=3, epsilon=1.0, while_pending=bad)
        msg = str(e.value)
        assert msg.startswith("while_pending = ") and repr(bad).strip("'") in msg, msg
        assert '"wait" (default) or "pipeline"' in msg, msg
    assert "pipeline" in repr(make("dp_ts"))


# ---------------------------------------------------------------------------------------------
# The decision service and a pipelined Python session: the same decisions.

# Kinds the service pipelines, with their problem (the create request's keys and the Python
# `Policy`'s) and parameters; private ones with simulation-grade (seeded) noise so that both sides
# draw alike (the service's default is deployment-grade noise from the OS). One line a kind.
FINITE = {"arms": 3}
SERVICE_CASES = [
    ("dp_ts", FINITE, {"epsilon": 1.0, "noise": "simulation", "boundary": "reject"}),
    ("ucb1", FINITE, {}),  # non-private
    ("adac_ucb", FINITE, {"rho": 0.5, "noise": "simulation", "boundary": "reject"}),
    ("adaptive_ucb", FINITE, {}),  # non-private
    ("adac_gope", {"arms": CASES["adac_gope"]["arms"]}, {"rho": 1.0, "delta": 0.001, "noise": "simulation"}),
    ("adac_oful", {"dim": D, "horizon": 400}, {"rho": 1.0, "noise": "simulation"}),
    ("dp_tt", {"arms": 3, "delta": 0.05}, {"epsilon": 10.0, "noise": "simulation"}),
    ("lin_ucb", {"arms": CASES["adac_gope"]["arms"]}, {}),  # non-private
]


@pytest.mark.parametrize("kind,problem,params", SERVICE_CASES, ids=[c[0] for c in SERVICE_CASES])
def test_a_pipelined_python_session_equals_the_service(server, kind, problem, params):  # noqa: F811
    from dpbandits.service import Client, ServiceError

    url = server[0]
    admin = Client(url, token=ADMIN)
    exp = admin.create(f"pipe-{kind}", policy={"kind": kind, **params}, seed=11,
                       while_pending="pipeline", allow_non_private=True, **problem)
    assert exp.created["guarantee"]["noise"] != "deployment-grade"
    p = dpbandits.Policy(kind, seed=11, while_pending="pipeline", **problem, **params)
    rng = random.Random(6)
    acts = np.random.default_rng(6)
    outstanding = []
    played = set()
    most = 0
    for step in range(300):
        a = actions_for(p, acts)
        ours = p.decide(a)
        if ours is None:  # BAI: the stopping rule fired on both sides
            with pytest.raises(ServiceError) as e:
                exp.decide(wait=0)
            assert e.value.status == 409 and e.value.body.get("stopped") is not None, e.value
            break
        theirs = exp.decide(actions=None if a is None else a.tolist(), wait=0)
        assert ours == (theirs["decision_id"], theirs["arm"]), f"{kind}: step {step}"
        outstanding.append(ours)
        played.add(ours.arm)
        # Rewards arrive late and out of order: now and then a random batch of the pending.
        if rng.random() < 0.3:
            rng.shuffle(outstanding)
            n = rng.randint(1, len(outstanding))
            for d in outstanding[:n]:
                r = float(rng.random() < 0.3 + 0.25 * (d.arm % 3))
                p.observe_decision(d.decision_id, r)
                assert exp.reward(d.decision_id, r)["status"] != "duplicate"
            del outstanding[:n]
        assert len(p.pending) == exp.status()["pending"], f"{kind}: step {step}"
        most = max(most, len(outstanding))
    assert p.pending == sorted(d.decision_id for d in outstanding)
    assert most >= 5, f"{kind}: at most {most} decisions were pending at once"
    if p.setting == "finite_armed":
        assert len(played) >= 2, played
