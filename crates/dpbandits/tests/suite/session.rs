//! The online session ([`dpbandits::session`]): every registry kind of every setting runs
//! through it at its example parameters; it continues a snapshot bit-identically; it refuses bad
//! action sets, rewards and out-of-order calls before the policy sees them, and a refused call
//! leaves everything as if it had not been made.

use dpbandits::config::Setting;
use dpbandits::contextual::ActionSet;
use dpbandits::registry::POLICIES;
use dpbandits::rng::SimRng;
use dpbandits::session::{Decision, Next, Problem, Session};
use dpbandits::{Error, Result};
use rand::{RngExt, SeedableRng};

pub(super) const DIM: usize = 3;

pub(super) fn problem(setting: Setting) -> Problem {
    match setting {
        Setting::FiniteArmed => Problem::Finite { arms: 4 },
        Setting::Linear => Problem::Linear {
            arms: vec![
                vec![1.0, 0.0],
                vec![0.0, 1.0],
                vec![0.6, 0.8],
                vec![-0.8, 0.6],
            ],
        },
        Setting::Contextual => Problem::Contextual {
            dim: DIM,
            horizon: 10_000,
        },
        Setting::Bai => Problem::Bai {
            arms: 3,
            delta: 0.1,
        },
    }
}

fn example(kind: &str) -> toml::Table {
    let e = dpbandits::registry::policy(kind).unwrap();
    toml::from_str(e.info.example).unwrap()
}

/// A deterministic stream of rounds: action sets (contextual) and rewards in [0, 1].
struct World {
    rng: SimRng,
    features: Vec<f64>,
}

impl World {
    fn new(seed: u64) -> Self {
        World {
            rng: SimRng::seed_from_u64(seed),
            features: vec![],
        }
    }
    fn actions(&mut self) -> ActionSet<'_> {
        let k = 5;
        self.features = (0..k * DIM)
            .map(|_| self.rng.random_range(-0.5..0.5))
            .collect();
        ActionSet {
            d: DIM,
            k,
            features: &self.features,
        }
    }
    fn reward(&mut self, arm: usize) -> f64 {
        // Bernoulli-like outcomes with arm-dependent means, inside every boundary.
        let p = 0.2 + 0.15 * (arm % 4) as f64;
        f64::from(u8::from(self.rng.random::<f64>() < p))
    }
}

/// One decision and its reward; `None` once a BAI run stopped.
fn step(s: &mut Session, w: &mut World) -> Result<Option<usize>> {
    let d = match s.next() {
        Next::ActionSet { .. } => {
            let set = w.actions();
            let features = set.features.to_vec();
            s.decide_with(&ActionSet {
                d: DIM,
                k: 5,
                features: &features,
            })?
        }
        Next::Decision => s.decide()?,
        Next::Stopped { .. } => return Ok(None),
        Next::Reward { .. } => panic!("no reward is pending between steps"),
    };
    let Decision::Play { arm, .. } = d else {
        return Ok(None);
    };
    let r = w.reward(arm);
    s.observe(arm, r)?;
    Ok(Some(arm))
}

fn run(s: &mut Session, w: &mut World, n: usize) -> Vec<usize> {
    let mut arms = vec![];
    for _ in 0..n {
        match step(s, w).unwrap() {
            Some(a) => arms.push(a),
            None => break,
        }
    }
    arms
}

/// Every kind of the registry, at its example parameters, runs 300 rounds through a session;
/// a snapshot taken after 120 rounds continues with the same decisions.
#[test]
fn every_kind_runs_and_restores_bit_identically() {
    for e in POLICIES {
        let kind = e.kind();
        let mut s = Session::new(kind, example(kind), &problem(e.setting()), 7)
            .unwrap_or_else(|err| panic!("{kind}: {err}"));
        assert_eq!(s.setting(), e.setting(), "{kind}");
        assert!(s.guarantee().is_ok(), "{kind}");
        let mut w = World::new(11);
        let first = run(&mut s, &mut w, 120);
        let bytes = s.snapshot().unwrap_or_else(|err| panic!("{kind}: {err}"));
        // the world's generator is cloned too, so both continuations see the same data
        let mut w2 = World {
            rng: w.rng.clone(),
            features: vec![],
        };
        let mut r = Session::restore(&bytes).unwrap_or_else(|err| panic!("{kind}: {err}"));
        assert_eq!(r.t(), s.t(), "{kind}");
        let a = run(&mut s, &mut w, 180);
        let b = run(&mut r, &mut w2, 180);
        assert_eq!(a, b, "{kind}: a restored session decides differently");
        assert!(
            !first.is_empty(),
            "{kind}: no decision at all in 120 rounds"
        );
    }
}

/// The finite path of the session gives the decisions of the policy driven directly (the
/// simulator's calls: `choose(t)` then `observe`).
#[test]
fn a_finite_session_decides_as_the_policy_itself() {
    use dpbandits::registry::Built;
    for kind in ["ucb1", "adac_ucb", "dp_se", "dp_ts", "adap_ucb"] {
        let e = dpbandits::registry::policy(kind).unwrap();
        let Built::Finite(cfg) = e.build(example(kind)).unwrap() else {
            panic!("{kind}: not finite")
        };
        let mut p = cfg.build(4, 5).unwrap();
        let mut s = Session::new(kind, example(kind), &Problem::Finite { arms: 4 }, 5).unwrap();
        let (mut w1, mut w2) = (World::new(3), World::new(3));
        for t in 0..500 {
            let a = p.choose(t).arm;
            p.observe(a, w1.reward(a)).unwrap();
            let b = step(&mut s, &mut w2).unwrap().unwrap();
            assert_eq!(a, b, "{kind}: round {t}");
        }
    }
}

fn contextual_kinds() -> Vec<&'static str> {
    POLICIES
        .iter()
        .filter(|e| e.setting() == Setting::Contextual)
        .map(|e| e.kind())
        .collect()
}

/// NaN, inf, a wrong width, an empty set and an action longer than the kind's bound are refused
/// before the policy sees them, naming `actions`; the session then continues exactly as if the
/// call had not been made (same decisions as a session that never saw it). Every contextual kind.
#[test]
fn bad_action_sets_are_refused_and_change_nothing() {
    let kinds = contextual_kinds();
    assert!(kinds.len() >= 3, "{kinds:?}");
    for kind in kinds {
        let p = problem(Setting::Contextual);
        let mut clean = Session::new(kind, example(kind), &p, 9).unwrap();
        let mut poked = Session::new(kind, example(kind), &p, 9).unwrap();
        let bound = match poked.policy() {
            dpbandits::registry::Restored::Contextual(p) => p.max_action_norm(),
            _ => unreachable!(),
        };
        assert!(bound.is_finite() && bound > 0.0, "{kind}: bound {bound}");
        let (mut w1, mut w2) = (World::new(5), World::new(5));
        for round in 0..200 {
            if round % 20 == 7 {
                let good: Vec<f64> = vec![0.1; 5 * DIM];
                let mut bad_sets: Vec<(usize, usize, Vec<f64>)> = vec![];
                for (i, x) in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e200]
                    .into_iter()
                    .enumerate()
                {
                    let mut f = good.clone();
                    let n = f.len();
                    f[(round + i) % n] = x;
                    bad_sets.push((5, DIM, f));
                }
                // longer than the bound (but finite)
                let mut f = good.clone();
                f[0] = bound * 1.5;
                bad_sets.push((5, DIM, f));
                // wrong width, both ways, and an empty set
                bad_sets.push((5, DIM + 1, vec![0.1; 5 * (DIM + 1)]));
                bad_sets.push((5, DIM - 1, vec![0.1; 5 * (DIM - 1)]));
                bad_sets.push((0, DIM, vec![]));
                // a k that does not match the features
                bad_sets.push((6, DIM, good.clone()));
                let before = poked.snapshot().unwrap();
                for (k, d, f) in &bad_sets {
                    let err = poked
                        .decide_with(&ActionSet {
                            d: *d,
                            k: *k,
                            features: f,
                        })
                        .expect_err("refused");
                    assert!(
                        matches!(&err, Error::Param { field, .. } if field.starts_with("actions")),
                        "{kind}: {err}"
                    );
                    // a reward with no decided round is refused too
                    assert!(matches!(poked.observe(0, 0.5), Err(Error::Protocol(_))));
                }
                assert_eq!(poked.snapshot().unwrap(), before, "{kind}: state changed");
                // finite inputs within the bound are accepted, not clipped away
                assert!(bound >= 1.0);
            }
            let a = step(&mut clean, &mut w1).unwrap();
            let b = step(&mut poked, &mut w2).unwrap();
            assert_eq!(a, b, "{kind}: round {round}");
        }
    }
}

/// Rewards the boundary refuses, another arm, a reward with nothing decided, a decision while
/// the open commitment waits, a decision without (or with) an action set: each refused, naming
/// the field, and the session goes on as if it had not happened.
#[test]
fn protocol_and_reward_errors_change_nothing() {
    for e in POLICIES {
        let kind = e.kind();
        let p = problem(e.setting());
        let mut clean = Session::new(kind, example(kind), &p, 21).unwrap();
        let mut poked = Session::new(kind, example(kind), &p, 21).unwrap();
        let (mut w1, mut w2) = (World::new(8), World::new(8));
        // nothing decided yet
        assert!(
            matches!(poked.observe(0, 0.5), Err(Error::Protocol(_))),
            "{kind}"
        );
        match e.setting() {
            Setting::Contextual => {
                assert!(
                    matches!(poked.decide(), Err(Error::Param { field, .. }) if field == "actions"),
                    "{kind}"
                );
            }
            _ => {
                let f = [0.0; 3];
                let set = ActionSet {
                    d: 3,
                    k: 1,
                    features: &f,
                };
                assert!(
                    matches!(poked.decide_with(&set), Err(Error::Param { field, .. }) if field == "actions"),
                    "{kind}"
                );
            }
        }
        for round in 0..60 {
            if let Next::Stopped { .. } = poked.next() {
                break;
            }
            // decide on both
            let dp = match poked.next() {
                Next::ActionSet { .. } => {
                    let set = w2.actions();
                    let f = set.features.to_vec();
                    poked
                        .decide_with(&ActionSet {
                            d: DIM,
                            k: 5,
                            features: &f,
                        })
                        .unwrap()
                }
                _ => poked.decide().unwrap(),
            };
            let dc = match clean.next() {
                Next::ActionSet { .. } => {
                    let set = w1.actions();
                    let f = set.features.to_vec();
                    clean
                        .decide_with(&ActionSet {
                            d: DIM,
                            k: 5,
                            features: &f,
                        })
                        .unwrap()
                }
                _ => clean.decide().unwrap(),
            };
            assert_eq!(dp, dc, "{kind}: round {round}");
            let Some(arm) = dp.arm() else { break };
            let before = poked.snapshot().unwrap();
            // NaN is never a reward
            assert!(
                matches!(poked.observe(arm, f64::NAN), Err(Error::Param { field, .. }) if field == "reward"),
                "{kind}"
            );
            // another arm
            let other = arm + 1;
            assert!(
                matches!(poked.observe(other, 0.5), Err(Error::Param { field, .. }) if field == "arm"),
                "{kind}"
            );
            // a reward far outside every boundary: refused, or clipped by a clipping boundary
            let b = poked.boundary();
            if b.mode == dpbandits::privacy::BoundaryMode::Reject {
                assert!(poked.observe(arm, 1e300).is_err(), "{kind}");
            }
            assert_eq!(poked.snapshot().unwrap(), before, "{kind}: state changed");
            // when every decided round waits, a further decision is refused
            if let Next::Reward { .. } = poked.next() {
                assert!(matches!(poked.decide(), Err(Error::Protocol(_))), "{kind}");
                assert_eq!(poked.snapshot().unwrap(), before, "{kind}: state changed");
            }
            let r1 = w1.reward(arm);
            let r2 = w2.reward(arm);
            clean.observe(arm, r1).unwrap();
            poked.observe(arm, r2).unwrap();
        }
    }
}

/// The setting of the problem must be the kind's, named in the error; a table carrying the
/// problem's keys builds the same session as a typed problem.
#[test]
fn problems_are_checked_and_read_from_tables() {
    let err = Session::new("adac_ucb", example("adac_ucb"), &problem(Setting::Bai), 1)
        .expect_err("wrong setting");
    assert!(err.to_string().contains("kind"), "{err}");
    let mut t = example("dp_tt");
    t.insert("arms".into(), toml::Value::Float(3.0));
    t.insert("delta".into(), toml::Value::Float(0.1));
    let mut a = Session::from_table("dp_tt", t, 4).unwrap();
    let mut b = Session::new("dp_tt", example("dp_tt"), &problem(Setting::Bai), 4).unwrap();
    let (mut w1, mut w2) = (World::new(1), World::new(1));
    assert_eq!(run(&mut a, &mut w1, 200), run(&mut b, &mut w2, 200));
    let mut t = example("adac_ucb");
    t.insert("arms".into(), toml::Value::String("four".into()));
    let err = Session::from_table("adac_ucb", t, 1).expect_err("a string");
    assert!(err.to_string().starts_with("arms = "), "{err}");
    let err = Session::from_table("adac_oful", example("adac_oful"), 1).expect_err("no dim");
    assert!(err.to_string().starts_with("dim = (missing)"), "{err}");
}

/// A finite-armed episodic kind may have several decisions of one commitment outstanding (the
/// decision service issues them before their rewards arrive); rewards then arrive for them.
#[test]
fn decisions_of_one_commitment_may_be_outstanding() {
    let mut s = Session::new(
        "adac_ucb",
        example("adac_ucb"),
        &Problem::Finite { arms: 3 },
        2,
    )
    .unwrap();
    let mut w = World::new(2);
    // play until a commitment of at least 3 rounds opens
    loop {
        let d = s.decide().unwrap();
        let Decision::Play { arm, opened } = d else {
            unreachable!()
        };
        if opened.is_some_and(|n| n >= 3) {
            let d2 = s.decide().unwrap();
            let d3 = s.decide().unwrap();
            assert_eq!(d2.arm(), Some(arm));
            assert_eq!(d3.arm(), Some(arm));
            assert_eq!(s.pending(), 3);
            for _ in 0..3 {
                s.observe(arm, w.reward(arm)).unwrap();
            }
            assert_eq!(s.pending(), 0);
            break;
        }
        s.observe(arm, w.reward(arm)).unwrap();
    }
}
