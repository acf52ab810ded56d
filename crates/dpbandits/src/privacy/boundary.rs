//! The privacy boundary: every sensitivity argument assumes bounded rewards.
//!
//! A private policy owns a [`RewardBoundary`]; rewards are clipped to it inside the policy (at the
//! point where they enter a private statistic), or, with [`BoundaryMode::Reject`], refused with a
//! clear error at the edges of the library: the experiment planner refuses an environment that can
//! emit rewards outside the boundary, and [`RewardBoundary::admit`] refuses a single reward fed
//! through the API.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// What to do with a reward outside the boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoundaryMode {
    /// Clip to the nearest end (default; keeps the guarantee, biases the estimate).
    #[default]
    Clip,
    /// Refuse: an error at configuration time (environments that can leave the range) or from
    /// [`RewardBoundary::admit`].
    Reject,
}

/// A closed reward interval `[lo, hi]` and what to do outside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RewardBoundary {
    /// Lower end.
    pub lo: f64,
    /// Upper end.
    pub hi: f64,
    /// Clip or reject.
    pub mode: BoundaryMode,
}

impl RewardBoundary {
    /// `[0, 1]`, the range the finite-armed papers assume.
    pub fn unit(mode: BoundaryMode) -> Self {
        RewardBoundary {
            lo: 0.0,
            hi: 1.0,
            mode,
        }
    }

    /// A checked boundary.
    pub fn new(lo: f64, hi: f64, mode: BoundaryMode) -> Result<Self> {
        if !(lo.is_finite() && hi.is_finite() && lo < hi) {
            return Err(Error::param(
                "boundary",
                format!("[{lo}, {hi}]"),
                "finite lo < hi",
            ));
        }
        Ok(RewardBoundary { lo, hi, mode })
    }

    /// Width `hi - lo`: the sensitivity of one reward.
    pub fn width(&self) -> f64 {
        self.hi - self.lo
    }

    /// Clip one reward (NaN is mapped to `lo`, so no NaN can reach a private statistic).
    #[inline]
    pub fn clip(&self, r: f64) -> f64 {
        if r.is_nan() {
            self.lo
        } else {
            r.clamp(self.lo, self.hi)
        }
    }

    /// Clip a sum of `n` rewards to `[n lo, n hi]`. Defence in depth for the episode fast path,
    /// whose sums the simulator draws from already-bounded rewards.
    #[inline]
    pub fn clip_sum(&self, sum: f64, n: u64) -> f64 {
        let n = n as f64;
        if sum.is_nan() {
            n * self.lo
        } else {
            sum.clamp(n * self.lo, n * self.hi)
        }
    }

    /// Apply the boundary to a reward given through the API: clip, or refuse in reject mode.
    pub fn admit(&self, r: f64) -> Result<f64> {
        match self.mode {
            BoundaryMode::Clip => Ok(self.clip(r)),
            BoundaryMode::Reject if r >= self.lo && r <= self.hi => Ok(r),
            BoundaryMode::Reject => Err(Error::Boundary {
                value: r,
                lo: self.lo,
                hi: self.hi,
            }),
        }
    }

    /// Whether every reward in `[lo, hi]` is inside the boundary.
    pub fn contains_range(&self, lo: f64, hi: f64) -> bool {
        lo >= self.lo && hi <= self.hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_and_reject() {
        let b = RewardBoundary::unit(BoundaryMode::Clip);
        assert_eq!(b.clip(1.5), 1.0);
        assert_eq!(b.clip(-0.5), 0.0);
        assert_eq!(b.clip(f64::NAN), 0.0);
        assert_eq!(b.clip(0.25), 0.25);
        assert_eq!(b.clip_sum(12.0, 10), 10.0);
        assert_eq!(b.admit(3.0).unwrap(), 1.0);
        let r = RewardBoundary::unit(BoundaryMode::Reject);
        assert_eq!(r.admit(0.5).unwrap(), 0.5);
        let e = r.admit(1.5).unwrap_err().to_string();
        assert!(e.contains("1.5") && e.contains("[0, 1]"), "{e}");
        assert!(r.admit(f64::NAN).is_err());
        assert!(RewardBoundary::new(1.0, 0.0, BoundaryMode::Clip).is_err());
    }
}
