//! The calling protocol every policy enforces, in every setting.
//!
//! A policy is driven by alternating calls: `choose` (finite, linear, contextual) or `next` (BAI)
//! opens a **commitment** (an arm and a number of rounds), and `observe` calls report rewards of
//! that arm until the commitment is used up. The contract, the same for every policy:
//!
//! * **Off-policy observations are refused.** Reporting a reward of another arm than the committed
//!   one is [`Error::Protocol`]. (The episodic algorithms' privacy arguments and indices assume an
//!   episode's rewards come from the arm they committed to; a caller that played something else
//!   must not feed it to the policy.)
//! * **Out-of-order calls are refused.** An observation with no open commitment, or of more rounds
//!   than are left in it, is [`Error::Protocol`].
//! * **Rewards pass the boundary first.** A reward is admitted by the policy's
//!   [`RewardBoundary`] (clipped, or refused in `reject` mode; NaN and, for non-private policies,
//!   anything outside `[-1e12, 1e12]` are always refused), and a sum of rewards must be a
//!   [`RewardSum`] built by a boundary inside the policy's own.
//! * **A refused call changes nothing**: the policy can be driven on as if it had not been made.
//! * Calling `choose` again while a commitment is open returns what is left of it (so a plain
//!   step-by-step loop works for every policy).
//!
//! [`Gate`] implements the contract once; every policy owns one and calls it before touching its
//! own state.

use crate::error::{Error, Result};
use crate::privacy::{RewardBoundary, RewardSum};
use serde::{Deserialize, Serialize};

/// An open commitment: the arm and the rounds left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commitment {
    /// The committed arm.
    pub arm: usize,
    /// Rounds still to be observed (>= 1).
    pub left: u64,
}

/// The protocol state of one policy: its boundary and its open commitment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    boundary: RewardBoundary,
    open: Option<Commitment>,
}

impl Gate {
    /// A gate with no open commitment.
    pub fn new(boundary: RewardBoundary) -> Self {
        Gate {
            boundary,
            open: None,
        }
    }

    /// The boundary rewards must pass.
    pub fn boundary(&self) -> RewardBoundary {
        self.boundary
    }

    /// The open commitment, if any.
    #[inline]
    pub fn open(&self) -> Option<Commitment> {
        self.open
    }

    /// Open a commitment to `rounds >= 1` rounds of `arm` (replacing none: callers check
    /// [`Gate::open`] first).
    #[inline]
    pub fn commit(&mut self, arm: usize, rounds: u64) {
        debug_assert!(self.open.is_none() && rounds >= 1);
        self.open = Some(Commitment {
            arm,
            left: rounds.max(1),
        });
    }

    /// A one-round commitment to `arm` and its reward at once (a simulator's round, with no
    /// commitment open): the same as [`Self::commit`]`(arm, 1)` then [`Self::admit`]. On a
    /// refused reward the commitment stays open, as after `commit` and a failed `admit`.
    #[inline(always)]
    pub fn commit_admit(&mut self, arm: usize, reward: f64) -> Result<f64> {
        debug_assert!(self.open.is_none());
        match self.boundary.admit(reward) {
            Ok(r) => {
                self.open = None;
                Ok(r)
            }
            Err(e) => {
                self.commit(arm, 1);
                Err(e)
            }
        }
    }

    /// Give up the open commitment (contextual rounds: a new context replaces an unobserved one).
    pub fn abandon(&mut self) {
        self.open = None;
    }

    #[inline]
    fn check(&self, arm: usize, n: u64) -> Result<()> {
        match self.open {
            None => Err(Error::Protocol(format!(
                "observed {n} reward(s) of arm {arm} with no open commitment: call choose first"
            ))),
            Some(c) if c.arm != arm => Err(Error::Protocol(format!(
                "observed arm {arm}, but the policy committed to arm {} (off-policy \
                 observations are not accepted)",
                c.arm
            ))),
            Some(c) if n > c.left => Err(Error::Protocol(format!(
                "observed {n} rewards of arm {arm}, but only {} round(s) of the commitment are left",
                c.left
            ))),
            Some(_) if n == 0 => Err(Error::Protocol(format!(
                "observed an empty sum of rewards of arm {arm}"
            ))),
            Some(_) => Ok(()),
        }
    }

    #[inline]
    fn consume(&mut self, n: u64) {
        if let Some(c) = self.open.as_mut() {
            c.left -= n;
            if c.left == 0 {
                self.open = None;
            }
        }
    }

    /// Admit one reward of `arm`: checks the commitment, applies the boundary, consumes one round.
    /// Nothing changes on error.
    #[inline(always)]
    pub fn admit(&mut self, arm: usize, reward: f64) -> Result<f64> {
        self.check(arm, 1)?;
        let r = self.boundary.admit(reward)?;
        self.consume(1);
        Ok(r)
    }

    /// Admit a sum of rewards of `arm`: checks the commitment and that `sum` was built by a
    /// boundary inside this one, consumes `sum.n()` rounds. Nothing changes on error.
    #[inline]
    pub fn admit_sum(&mut self, arm: usize, sum: &RewardSum) -> Result<f64> {
        self.check(arm, sum.n())?;
        if !sum.is_within(&self.boundary) {
            let (lo, hi) = sum.range();
            return Err(Error::Protocol(format!(
                "a sum of rewards in [{lo}, {hi}] is not inside the policy's boundary [{}, {}]",
                self.boundary.lo, self.boundary.hi
            )));
        }
        self.consume(sum.n());
        Ok(sum.sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::BoundaryMode;

    #[test]
    fn contract() {
        let b = RewardBoundary::unit(BoundaryMode::Reject);
        let mut g = Gate::new(b);
        assert!(matches!(g.admit(0, 0.5), Err(Error::Protocol(_))));
        g.commit(1, 3);
        assert!(matches!(g.admit(0, 0.5), Err(Error::Protocol(_))));
        assert!(matches!(g.admit(1, 1.5), Err(Error::Boundary { .. })));
        assert_eq!(g.open(), Some(Commitment { arm: 1, left: 3 }));
        assert_eq!(g.admit(1, 0.5).unwrap(), 0.5);
        let two = b.sum_of([1.0, 0.0]).unwrap();
        let three = b.sum_of([1.0, 0.0, 1.0]).unwrap();
        assert!(matches!(g.admit_sum(1, &three), Err(Error::Protocol(_))));
        let wide = RewardBoundary::numeric().sum_of([0.5, 0.5]).unwrap();
        assert!(matches!(g.admit_sum(1, &wide), Err(Error::Protocol(_))));
        assert_eq!(g.admit_sum(1, &two).unwrap(), 1.0);
        assert_eq!(g.open(), None);
        assert!(matches!(g.admit(1, 0.5), Err(Error::Protocol(_))));
    }
}
