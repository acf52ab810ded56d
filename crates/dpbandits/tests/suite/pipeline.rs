//! Serving while outcomes are pending (issue 40): every registry kind of every setting accepts
//! `while_pending = "pipeline"`, serves decisions with no reward reported, takes the rewards in
//! any order (here: reverse), refuses a decision observed twice naming it, continues a snapshot
//! taken mid-flight bit-identically, and with rewards that arrive at once decides as the
//! textbook (wait-mode) session. The per-rule tests of what a pending reward can change are in
//! `src/session.rs` (`pipeline_tests`).

use super::session::problem;
use dpbandits::contextual::ActionSet;
use dpbandits::registry::POLICIES;
use dpbandits::rng::SimRng;
use dpbandits::session::{Decision, PipelineRule, Session, WhilePending};
use dpbandits::{Error, Result};
use rand::{RngExt, SeedableRng};

use super::session::DIM;
const K: usize = 5;

fn session(kind: &str, mode: WhilePending, seed: u64) -> Session {
    let e = dpbandits::registry::policy(kind).unwrap();
    let params: toml::Table = toml::from_str(e.info.example).unwrap();
    let mut s = Session::new(kind, params, &problem(e.setting()), seed)
        .unwrap_or_else(|err| panic!("{kind}: {err}"));
    s.set_while_pending(mode)
        .unwrap_or_else(|err| panic!("{kind}: {err}"));
    s
}

/// Decide once (contextual: on a fresh action set from `rng`); `None` once a BAI run stopped.
fn decide(s: &mut Session, rng: &mut SimRng) -> Result<Option<usize>> {
    let d = if s.dim().is_some() {
        let features: Vec<f64> = (0..K * DIM).map(|_| rng.random_range(-0.5..0.5)).collect();
        s.decide_with(&ActionSet {
            d: DIM,
            k: K,
            features: &features,
        })?
    } else {
        s.decide()?
    };
    Ok(match d {
        Decision::Play { arm, .. } => Some(arm),
        Decision::Stop { .. } => None,
    })
}

fn reward(index: u64, arm: usize) -> f64 {
    let p = 0.2 + 0.15 * (arm % 4) as f64;
    let u = (index.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) as f64 / (1u64 << 53) as f64;
    f64::from(u8::from(u < p))
}

/// Every kind serves 120 decisions with no reward reported, then takes the 120 rewards newest
/// first; a decision observed twice, or never issued, is refused naming `decision` and changes
/// nothing.
#[test]
fn every_kind_serves_while_rewards_are_pending_and_takes_them_in_any_order() {
    for e in POLICIES {
        let kind = e.kind();
        let mut s = session(kind, WhilePending::Pipeline, 3);
        let mut rng = SimRng::seed_from_u64(1);
        let mut arms = vec![];
        for i in 0..120 {
            let arm = decide(&mut s, &mut rng)
                .unwrap_or_else(|err| panic!("{kind}: decision {i}: {err}"))
                .unwrap_or_else(|| panic!("{kind}: stopped with no reward observed"));
            arms.push(arm);
        }
        assert_eq!(s.pending(), 120, "{kind}");
        assert_eq!(s.issued(), 120, "{kind}");
        for i in (0..120u64).rev() {
            s.observe_decision(i, reward(i, arms[i as usize]))
                .unwrap_or_else(|err| panic!("{kind}: reward of decision {i}: {err}"));
            if i == 60 {
                let before = s.snapshot().unwrap();
                for bad in [60u64, 119, 500] {
                    match s.observe_decision(bad, 1.0) {
                        Err(Error::Param { field, .. }) => assert_eq!(field, "decision", "{kind}"),
                        other => panic!("{kind}: decision {bad} observed twice: {other:?}"),
                    }
                }
                assert_eq!(
                    s.snapshot().unwrap(),
                    before,
                    "{kind}: a refusal changed nothing"
                );
            }
        }
        assert_eq!(s.pending(), 0, "{kind}");
        assert_eq!(s.t(), 120, "{kind}: every reward received once");
        // And it goes on deciding.
        decide(&mut s, &mut rng).unwrap_or_else(|err| panic!("{kind}: {err}"));
    }
}

/// With every reward observed right after its decision, a pipelined session decides exactly as
/// the textbook (wait-mode) session of the same seed: the rules only change what happens while
/// rewards are pending (the episodic kinds open episodes by their pipelining rule, which differs
/// from the textbook's only in tie-breaks between unreleased arms: not checked here).
#[test]
fn with_no_delay_a_pipelined_session_decides_as_the_textbook() {
    for e in POLICIES {
        let kind = e.kind();
        let mut p = session(kind, WhilePending::Pipeline, 5);
        if p.pipeline_rule() == Some(PipelineRule::Ahead) {
            continue;
        }
        let mut w = session(kind, WhilePending::Wait, 5);
        let (mut rp, mut rw) = (SimRng::seed_from_u64(2), SimRng::seed_from_u64(2));
        for i in 0..300u64 {
            let a = decide(&mut p, &mut rp).unwrap();
            let b = decide(&mut w, &mut rw).unwrap();
            assert_eq!(a, b, "{kind}: decision {i}");
            let Some(arm) = a else { break };
            p.observe_decision(i, reward(i, arm)).unwrap();
            w.observe_decision(i, reward(i, arm)).unwrap();
        }
    }
}

/// One step of a delayed world: the rewards due by decision `i` (7 decisions late, every
/// third one 20 more), then decision `i`.
fn delayed_step(
    s: &mut Session,
    i: u64,
    rng: &mut SimRng,
    arms: &mut Vec<usize>,
    due: &mut Vec<(u64, u64)>,
) {
    due.sort_unstable();
    while due.first().is_some_and(|&(at, _)| at <= i) {
        let (_, j) = due.remove(0);
        s.observe_decision(j, reward(j, arms[j as usize])).unwrap();
    }
    if let Some(arm) = decide(s, rng).unwrap() {
        arms.push(arm);
        due.push((i + 7 + 20 * u64::from(i.is_multiple_of(3)), i));
    }
}

/// A pipelined session snapshotted with decisions pending (and, by the rewards-received rule,
/// rewards waiting for their arm's next commitment) continues bit-identically after a restore.
#[test]
fn a_pipelined_session_restores_mid_flight() {
    for e in POLICIES {
        let kind = e.kind();
        let mut a = session(kind, WhilePending::Pipeline, 9);
        let mut rng = SimRng::seed_from_u64(4);
        let (mut arms, mut due) = (vec![], vec![]);
        for i in 0..150 {
            delayed_step(&mut a, i, &mut rng, &mut arms, &mut due);
        }
        let bytes = a.snapshot().unwrap();
        let mut b = Session::restore(&bytes).unwrap_or_else(|err| panic!("{kind}: {err}"));
        assert_eq!(b.pending(), a.pending(), "{kind}");
        assert!(a.pending() > 0, "{kind}");
        assert_eq!(b.snapshot().unwrap(), bytes, "{kind}");
        let (mut arms_b, mut due_b, mut rng_b) = (arms.clone(), due.clone(), rng.clone());
        for i in 150..250 {
            delayed_step(&mut a, i, &mut rng, &mut arms, &mut due);
            delayed_step(&mut b, i, &mut rng_b, &mut arms_b, &mut due_b);
        }
        assert_eq!(arms, arms_b, "{kind}");
        assert_eq!(a.snapshot().unwrap(), b.snapshot().unwrap(), "{kind}");
    }
}
