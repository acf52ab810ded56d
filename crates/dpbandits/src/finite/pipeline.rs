//! Pipelined episodes: opening the next episode of an episodic policy (AdaC-UCB, AdaP-UCB,
//! AdaP-KLUCB) from the statistics already released while earlier episodes wait for their
//! rewards (delayed outcomes, `docs/service.md`, "Delayed and missing outcomes", strategy (b)).
//!
//! The textbook algorithms (`adac_ucb.rs`, `adap_ucb.rs`) run one episode at a time: the next
//! episode is chosen when the last reward of the current one has been observed and its
//! statistic released. With outcomes that come days later, a caller may instead want the next
//! commitment as soon as every round of the current one has been *issued*. A policy that
//! implements [`Pipelined`] (reached through [`super::Policy::pipelined`]) allows it:
//!
//! * [`Pipelined::open_ahead`] opens the next episode from the **released** statistics only,
//!   with the rule of the textbook algorithm: the same index, `t_l` = the episode's first round
//!   among all rounds committed, and the episode length = the arm's **committed** count (rounds
//!   of finished episodes plus those of episodes in flight: public counts), so lengths still
//!   double per arm. An arm whose episode is in flight keeps the index of its last release. An
//!   arm without a release has an infinite index, as in the textbook; ties between such arms go
//!   to the fewest committed rounds, then the lowest index (with nothing in flight this is the
//!   textbook's "first unplayed arm").
//! * [`Pipelined::settle`] takes the complete reward sum of one episode in flight (named by its
//!   first round) and releases its statistic, once, with the calibration of its own length; the
//!   arm's index then uses it (the last release, as in the textbook's forgetting).
//!
//! # Privacy
//! Each episode's rewards are exactly the rewards of the rounds it committed (the caller names
//! the episode by its first round), they enter that episode's release only, and the release is
//! drawn once, when the episode's committed count of rewards is in. Every episode boundary
//! (arm, length, first round) is computed from released statistics and public counts (rounds
//! committed, rounds observed), never from an unreleased reward. Releases on disjoint reward
//! sets, each chosen adaptively from earlier releases only, compose in parallel exactly as in
//! the textbook argument (zCDP: Azize & Basu 2024, Lemma 1 with App. D-B; pure DP: Azize &
//! Basu 2022, Lemma 1); only the *order* in which releases are drawn depends on when rewards
//! arrive, which is public (counts and times of received rewards).
//!
//! Kinds that do not implement it (per-step kinds such as `dp_ts`, DP-SE, the local kinds) keep
//! the default [`super::Policy::pipelined`] `None`: a caller then waits at each commitment
//! boundary.

use super::{Episode, Pull, argmax};
use crate::error::{Error, Result};
use crate::privacy::{NoiseSource, RewardBoundary, RewardSum};
use crate::protocol::Gate;
use serde::{Deserialize, Serialize};

/// A policy that can open episodes while earlier ones wait for their rewards (module docs).
pub trait Pipelined {
    /// Open the next episode from released statistics and committed counts only; `first` is
    /// the 0-based index of its first round among all rounds committed so far.
    ///
    /// # Errors
    /// [`Error::Protocol`] while a textbook episode is open (the policy is driven one way or the
    /// other), or an episode already opened at `first`; the policy is then unchanged.
    fn open_ahead(&mut self, first: u64) -> Result<Pull>;

    /// The complete reward sum of the episode in flight opened at `first`, of `arm`: its
    /// statistic is released now (once).
    ///
    /// # Errors
    /// [`Error::Protocol`] for an unknown episode, another arm, a sum of another number of
    /// rewards than the episode's length or from a wider boundary; the policy is then unchanged.
    fn settle(&mut self, first: u64, arm: usize, sum: &RewardSum) -> Result<()>;

    /// Episodes in flight.
    fn in_flight(&self) -> usize;
}

/// One episode in flight: its first round, its commitment (checked by its own gate) and the
/// arm's committed count when it was opened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Flight {
    first: u64,
    before: u64,
    gate: Gate,
    episode: Episode,
}

/// The episodes in flight of a pipelined policy (empty for a policy driven the textbook way;
/// then not written in its snapshot).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InFlight(Vec<Flight>);

impl InFlight {
    /// Whether no episode is in flight.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Episodes in flight.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Committed rounds per arm: `finished` plus the lengths of the episodes in flight.
    pub fn committed(&self, finished: &[u64]) -> Vec<u64> {
        let mut c = finished.to_vec();
        for f in &self.0 {
            c[f.episode.arm] += f.episode.len;
        }
        c
    }

    /// The next episode `(arm, length)` by the pipelining rule (module docs): arms without a
    /// release (`released(a)` false) first, by fewest committed rounds then lowest index, with
    /// one round for an arm with none committed; otherwise the argmax of `index` (ties: lowest
    /// index). The length is the arm's committed count (at least 1).
    pub fn pick(
        &self,
        finished: &[u64],
        released: impl Fn(usize) -> bool,
        index: impl Fn(usize) -> f64,
    ) -> (usize, u64) {
        let committed = self.committed(finished);
        let k = committed.len();
        let unreleased = (0..k)
            .filter(|&a| !released(a))
            .min_by_key(|&a| (committed[a], a));
        let arm = match unreleased {
            Some(a) => a,
            None => argmax((0..k).map(index)),
        };
        (arm, committed[arm].max(1))
    }

    /// Record the episode `(arm, len)` opened at `first`.
    ///
    /// # Errors
    /// [`Error::Protocol`] when an episode was already opened at `first`.
    pub fn open(
        &mut self,
        first: u64,
        arm: usize,
        len: u64,
        finished: &[u64],
        boundary: &RewardBoundary,
    ) -> Result<Pull> {
        if self.0.iter().any(|f| f.first == first) {
            return Err(Error::Protocol(format!(
                "an episode was already opened at round {first}"
            )));
        }
        let before = self.committed(finished)[arm];
        let mut gate = Gate::new(*boundary);
        gate.commit(arm, len);
        self.0.push(Flight {
            first,
            before,
            gate,
            episode: Episode::start(arm, len, boundary),
        });
        Ok(Pull { arm, steps: len })
    }

    /// Take the complete sum of the episode opened at `first` through its gate (and onto the
    /// deployment grid, as `episode_step` in `mod.rs`); returns the finished episode and the arm's
    /// committed count at its end (`before + len`, for the index count). Nothing changes on error.
    ///
    /// # Errors
    /// As [`Pipelined::settle`].
    pub fn settle(
        &mut self,
        first: u64,
        arm: usize,
        sum: &RewardSum,
        noise: &NoiseSource,
        boundary: &RewardBoundary,
    ) -> Result<(Episode, u64)> {
        let Some(i) = self.0.iter().position(|f| f.first == first) else {
            return Err(Error::Protocol(format!(
                "no episode in flight opened at round {first}"
            )));
        };
        let f = &self.0[i];
        if sum.n() != f.episode.len {
            return Err(Error::Protocol(format!(
                "{} reward(s) for the episode opened at round {first}, of {} round(s): an episode \
                 in flight is settled with all its rewards at once",
                sum.n(),
                f.episode.len
            )));
        }
        let mut episode = Some(f.episode);
        let (_, done) = super::episode_step(f.gate, noise, boundary, &mut episode, arm, sum)?;
        let ep = done.ok_or_else(|| Error::Protocol("an incomplete episode".into()))?;
        let before = f.before;
        self.0.remove(i);
        Ok((ep, before + ep.len))
    }
}
