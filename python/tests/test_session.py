"""The Python `Policy` is the core's online session: driven through `dpbandits session` (the CLI,
JSON lines on stdin) and through `dpbandits.Policy` with the same kind, parameters, seed and
reward stream, it makes the same decisions, and ends in the same state (the same snapshot
bytes). Contextual action sets are checked before the policy sees them (ValueError naming
`actions`), and a refused call changes nothing."""

import json
import subprocess

import numpy as np
import pytest

import dpbandits

D = 3


class CliSession:
    """`dpbandits session --kind K --param key=value ... --seed S`, one call at a time."""

    def __init__(self, cli, kind, seed, **params):
        args = [str(cli), "session", "--kind", kind, "--seed", str(seed)]
        for k, v in params.items():
            args += ["--param", f"{k}={toml_value(v)}"]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def call(self, verb, arg=None):
        self.proc.stdin.write(json.dumps({verb: arg}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the CLI ended: {self.proc.stderr.read()}"
        return json.loads(line)

    def choose(self, actions=None):
        out = self.call("decide", None if actions is None else np.asarray(actions).tolist())
        if "error" in out:
            raise ValueError(out["error"])
        return out.get("arm")  # None once a BAI run stopped ({"stop": arm})

    def observe(self, arm, reward):
        out = self.call("observe", [arm, reward])
        assert out == {"ok": True}, out

    def snapshot(self):
        return bytes.fromhex(self.call("snapshot")["snapshot"])

    def close(self):
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0, self.proc.stderr.read()


def toml_value(v):
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v)
    return str(v)


def drive_both(cli, kind, seed, rounds, params, means, contextual=False):
    """The same kind through the CLI and through Python, with one deterministic stream of
    action sets and rewards (a reward depends on the round and the arm chosen); returns the
    decisions (checked equal round by round) and both final snapshots."""
    cs = CliSession(cli, kind, seed, **params)
    p = dpbandits.Policy(kind, seed=seed, **params)
    acts = np.random.default_rng(seed + 100)
    rewards = np.random.default_rng(seed + 200)
    decisions = []
    try:
        for t in range(rounds):
            a = acts.normal(size=(5, D)) / np.sqrt(D) if contextual else None
            ours = p.choose(a)
            theirs = cs.choose(a)
            assert ours == theirs, f"{kind}: round {t}: Python {ours}, CLI {theirs}"
            decisions.append(ours)
            if ours is None:  # BAI: stopped
                assert p.stopped
                break
            r = float(rewards.random() < means[ours % len(means)])
            p.observe(ours, r)
            cs.observe(ours, r)
        snaps = (p.snapshot(), cs.snapshot())
    finally:
        cs.close()
    return decisions, p, snaps


def test_finite_adac_ucb_equals_the_cli(cli):
    decisions, p, (ours, theirs) = drive_both(
        cli, "adac_ucb", 3, 600, {"arms": 4, "rho": 0.5}, [0.3, 0.5, 0.45, 0.7]
    )
    assert len(set(decisions)) == 4 and p.t == 600
    assert ours == theirs  # the same session state, byte for byte


@pytest.mark.parametrize("kind,params", [("adac_gope", {"rho": 1.0, "delta": 0.001}), ("lin_ucb", {})])
def test_linear_equals_the_cli(cli, kind, params):
    arms = np.random.default_rng(5).normal(size=(6, D)) / np.sqrt(D)
    decisions, p, (ours, theirs) = drive_both(
        cli, kind, 4, 400, {"arms": arms, **params}, [0.2, 0.4, 0.3, 0.6, 0.5, 0.1]
    )
    assert len(set(decisions)) >= 2 and p.t == 400
    assert ours == theirs


@pytest.mark.parametrize("kind,params", [("adac_oful", {"rho": 1.0}), ("oful", {})])
def test_contextual_equals_the_cli(cli, kind, params):
    decisions, p, (ours, theirs) = drive_both(
        cli,
        kind,
        6,
        300,
        {"dim": D, "horizon": 300, **params},
        [0.2, 0.8, 0.5, 0.4, 0.6],
        contextual=True,
    )
    assert len(set(decisions)) >= 2 and p.t == 300
    assert ours == theirs


def test_bai_dp_tt_equals_the_cli_until_it_stops(cli):
    decisions, p, (ours, theirs) = drive_both(
        cli, "dp_tt", 2, 200_000, {"arms": 3, "delta": 0.05, "epsilon": 10.0}, [0.9, 0.4, 0.2]
    )
    assert decisions[-1] is None, f"no stop in {len(decisions)} samples"
    assert p.stopped and p.recommend() == 0
    assert p.choose() is None  # stays stopped
    assert ours == theirs


CONTEXTUAL = [e for e in dpbandits.kinds() if e["setting"] == "contextual"]


def bad_action_sets():
    good = np.full((5, D), 0.1)
    out = []
    for i, x in enumerate([np.nan, np.inf, -np.inf]):
        a = good.copy()
        a[i % 5, i % D] = x
        out.append((f"{x}", a))
    far = good.copy()
    far[2, 0] = 1e150  # finite, with a norm over any kind's bound
    out.append(("over the bound", far))
    out.append(("too wide", np.full((5, D + 1), 0.1)))
    out.append(("too narrow", np.full((5, D - 1), 0.1)))
    out.append(("no action", np.zeros((0, D))))
    out.append(("1-D", np.full(D, 0.1)))
    out.append(("not numbers", [["a"] * D]))
    return out


@pytest.mark.parametrize("entry", CONTEXTUAL, ids=[e["kind"] for e in CONTEXTUAL])
def test_bad_action_sets_raise_and_change_nothing(entry):
    import tomllib

    assert len(CONTEXTUAL) >= 3
    params = {**tomllib.loads(entry["example"]), "dim": D, "horizon": 500}
    clean = dpbandits.Policy(entry["kind"], seed=8, **params)
    poked = dpbandits.Policy(entry["kind"], seed=8, **params)
    rng1, rng2 = np.random.default_rng(1), np.random.default_rng(1)
    for t in range(120):
        if t % 15 == 4:
            before = poked.snapshot()
            for what, bad in bad_action_sets():
                with pytest.raises(ValueError, match="actions") as e:
                    poked.choose(bad)
                if what == "over the bound":
                    assert "norm" in str(e.value), e.value
            with pytest.raises(ValueError, match="actions"):
                poked.choose()  # a contextual policy needs the round's actions
            with pytest.raises(ValueError):
                poked.observe(0, 1.0)  # no chosen round waits for a reward
            assert poked.snapshot() == before, f"{entry['kind']}: state changed"
        a = rng1.normal(size=(4, D)) / np.sqrt(D)
        b = rng2.normal(size=(4, D)) / np.sqrt(D)
        x, y = clean.choose(a), poked.choose(b)
        assert x == y, f"{entry['kind']}: round {t}"
        r = float((t * 7 + x) % 3 == 0)
        clean.observe(x, r)
        poked.observe(y, r)
    assert clean.snapshot() == poked.snapshot()


def test_action_sets_other_than_float64_arrays_are_converted():
    """Lists, integer and Fortran-ordered arrays are read as float64 k x d arrays."""
    ps = [dpbandits.Policy("oful", seed=2, dim=2, horizon=50) for _ in range(4)]
    a = np.array([[0.5, 0.25], [0.0, 1.0], [0.75, 0.5]])
    forms = [a, a.tolist(), np.asfortranarray(a), a.astype(np.float32)]
    choices = [p.choose(f) for p, f in zip(ps, forms)]
    assert len(set(choices)) == 1, choices
    ints = dpbandits.Policy("oful", seed=2, dim=2, horizon=50)
    assert ints.choose(np.array([[1, 0], [0, 1]])) in (0, 1)


def test_the_cli_refuses_what_python_refuses(cli):
    cs = CliSession(cli, "oful", 1, dim=D, horizon=50)
    try:
        err = cs.call("decide", [[0.1] * (D + 1)])
        assert err["error"].startswith("actions"), err
        err = cs.call("decide", [[1e150] + [0.0] * (D - 1)])
        assert err["error"].startswith("actions[0]"), err
        assert "error" in cs.call("decide", None)
        assert "error" in cs.call("observe", [0, 1.0])
        assert "error" in cs.call("no_such_call", None)
        assert cs.choose([[0.1] * D, [0.2] * D]) in (0, 1)
        assert "error" in cs.call("decide", [[0.1] * D])  # the round waits for its reward
    finally:
        cs.close()
