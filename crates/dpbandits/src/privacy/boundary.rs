//! The privacy boundary: every sensitivity argument assumes bounded rewards.
//!
//! Every policy owns a [`RewardBoundary`]: a private policy its privacy boundary (the range its
//! sensitivity argument assumes), a non-private one the numeric boundary
//! ([`RewardBoundary::numeric`], `|r| <= 1e12`, so that no sum can overflow or be poisoned).
//! Rewards enter a policy only through the boundary: one at a time ([`RewardBoundary::admit`]:
//! clipped, or refused with a clear error in [`BoundaryMode::Reject`]; a NaN or infinite reward
//! is always refused), or as a [`RewardSum`], which only the boundary can build: from individual
//! rewards ([`RewardBoundary::sum_of`]), or, inside the crate, from the exact draw of a simulated
//! environment whose reward range lies inside the boundary. A sum can therefore never carry an
//! unclipped reward into a private statistic: the sensitivity `(hi - lo)/n` of its mean holds by
//! construction, not by re-clipping the total (which would not bound one reward's influence).

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

    /// The numeric boundary of non-private policies: `[-1e12, 1e12]`, rejecting. It makes no
    /// privacy claim; it keeps one absurd reward (NaN, inf, 1e300) from poisoning every later
    /// index, and sums and sums of squares finite over any horizon.
    pub fn numeric() -> Self {
        RewardBoundary {
            lo: -MAX_ABS_REWARD,
            hi: MAX_ABS_REWARD,
            mode: BoundaryMode::Reject,
        }
    }

    /// Apply the boundary to a reward given through the API: clip, or refuse in reject mode. NaN
    /// is refused in both modes (it is not a reward; clipping it would hide a caller's bug).
    #[inline]
    pub fn admit(&self, r: f64) -> Result<f64> {
        if r.is_nan() {
            return Err(Error::param(
                "reward",
                r,
                format!("a number (the boundary is [{}, {}])", self.lo, self.hi),
            ));
        }
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

    /// One admitted reward as a sum of one.
    pub fn single(&self, r: f64) -> Result<RewardSum> {
        let r = self.admit(r)?;
        Ok(RewardSum {
            sum: r,
            n: 1,
            lo: self.lo,
            hi: self.hi,
        })
    }

    /// The sum of `rewards`, each admitted (clipped or refused) by this boundary.
    pub fn sum_of(&self, rewards: impl IntoIterator<Item = f64>) -> Result<RewardSum> {
        let mut s = self.empty_sum();
        for r in rewards {
            s.sum += self.admit(r)?;
            s.n += 1;
        }
        Ok(s)
    }

    /// The sum of `n` copies of one reward `r`, admitted once (a block of identical rewards,
    /// e.g. Bernoulli outcomes or a test's constant stream).
    pub fn repeated(&self, r: f64, n: u64) -> Result<RewardSum> {
        let r = self.admit(r)?;
        Ok(RewardSum {
            sum: r * n as f64,
            n,
            lo: self.lo,
            hi: self.hi,
        })
    }

    /// The sum of no rewards.
    pub fn empty_sum(&self) -> RewardSum {
        RewardSum {
            sum: 0.0,
            n: 0,
            lo: self.lo,
            hi: self.hi,
        }
    }

    /// The exact draw of the sum of `n` rewards from a simulated environment whose reward range
    /// the caller has checked to lie inside this boundary (or whose rewards it clipped one by
    /// one). Crate-internal: the public way to build a sum is [`RewardBoundary::sum_of`]. The
    /// total is clamped to `[n lo, n hi]` as defence in depth against rounding.
    pub(crate) fn drawn_sum(&self, sum: f64, n: u64) -> RewardSum {
        let nf = n as f64;
        RewardSum {
            sum: if sum.is_nan() {
                nf * self.lo
            } else {
                sum.clamp(nf * self.lo, nf * self.hi)
            },
            n,
            lo: self.lo,
            hi: self.hi,
        }
    }

    /// Whether every reward in `[lo, hi]` is inside the boundary.
    pub fn contains_range(&self, lo: f64, hi: f64) -> bool {
        lo >= self.lo && hi <= self.hi
    }
}

/// The largest reward magnitude the numeric boundary of non-private policies admits.
pub const MAX_ABS_REWARD: f64 = 1e12;

/// The sum of `n` rewards, each inside the range `[lo, hi]` of the boundary that built it. Only a
/// [`RewardBoundary`] can build one, so a private statistic computed from it has the sensitivity
/// its calibration assumes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RewardSum {
    sum: f64,
    n: u64,
    lo: f64,
    hi: f64,
}

impl RewardSum {
    /// A sum of `n` rewards under the numeric boundary ([`RewardBoundary::numeric`]), given as
    /// a total: for non-private policies (whose gate is the numeric boundary) fed with exact
    /// sums. A private policy's gate refuses it (its range is wider than any privacy boundary),
    /// so it cannot carry an unclipped reward into a private statistic.
    ///
    /// # Errors
    /// A non-finite total, `n = 0`, or a total outside `[-1e12 n, 1e12 n]`.
    pub fn numeric(sum: f64, n: u64) -> Result<RewardSum> {
        let b = RewardBoundary::numeric();
        let nf = n as f64;
        if n == 0 || !(sum.is_finite() && sum >= nf * b.lo && sum <= nf * b.hi) {
            return Err(Error::param(
                "sum",
                sum,
                format!("a finite total of n = {n} >= 1 rewards, each in [-1e12, 1e12]"),
            ));
        }
        Ok(RewardSum {
            sum,
            n,
            lo: b.lo,
            hi: b.hi,
        })
    }

    /// The total.
    pub fn sum(&self) -> f64 {
        self.sum
    }
    /// How many rewards.
    pub fn n(&self) -> u64 {
        self.n
    }
    /// The range every reward of the sum lies in.
    pub fn range(&self) -> (f64, f64) {
        (self.lo, self.hi)
    }
    /// Whether every reward of the sum lies inside `b`.
    pub fn is_within(&self, b: &RewardBoundary) -> bool {
        self.lo >= b.lo && self.hi <= b.hi
    }
    /// The sum's reward count, checked for a release under `boundary` (the one precondition of
    /// every mechanism: Gaussian, Laplace, and the deployment samplers): at least one reward,
    /// every one inside `boundary`, so the mean's sensitivity is `boundary.width() / n`.
    ///
    /// # Errors
    /// [`Error::Param`] naming `n` for an empty sum; [`Error::Protocol`] for a sum built by a
    /// wider boundary.
    pub fn releasable(&self, boundary: &RewardBoundary) -> Result<u64> {
        if self.n == 0 {
            return Err(Error::param(
                "n",
                0,
                "at least one reward in a released mean",
            ));
        }
        if !self.is_within(boundary) {
            return Err(Error::Protocol(format!(
                "a sum of rewards in [{}, {}] cannot be released under the boundary [{}, {}]",
                self.lo, self.hi, boundary.lo, boundary.hi
            )));
        }
        Ok(self.n)
    }
    /// Add the rewards of `other`, whose range must lie inside this sum's range.
    ///
    /// # Errors
    /// [`Error::Protocol`] if `other` was built by a wider boundary; `self` is unchanged.
    pub fn add(&mut self, other: &RewardSum) -> Result<()> {
        if other.lo < self.lo || other.hi > self.hi {
            return Err(Error::Protocol(format!(
                "a sum of rewards in [{}, {}] cannot join a sum over the boundary [{}, {}]",
                other.lo, other.hi, self.lo, self.hi
            )));
        }
        self.sum += other.sum;
        self.n += other.n;
        Ok(())
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
        assert_eq!(b.drawn_sum(12.0, 10).sum(), 10.0);
        assert_eq!(b.admit(3.0).unwrap(), 1.0);
        assert_eq!(b.admit(f64::INFINITY).unwrap(), 1.0);
        assert!(b.admit(f64::NAN).is_err());
        let s = b.sum_of([0.5, 7.0, -3.0]).unwrap();
        assert_eq!((s.sum(), s.n()), (1.5, 3));
        let n = RewardBoundary::numeric();
        assert!(n.admit(1e300).is_err() && n.admit(f64::INFINITY).is_err());
        let mut wide = n.empty_sum();
        wide.add(&s).unwrap();
        let mut narrow = b.empty_sum();
        assert!(matches!(narrow.add(&wide), Err(Error::Protocol(_))));
        assert_eq!(narrow.n(), 0);
        let r = RewardBoundary::unit(BoundaryMode::Reject);
        assert_eq!(r.admit(0.5).unwrap(), 0.5);
        let e = r.admit(1.5).unwrap_err().to_string();
        assert!(e.contains("1.5") && e.contains("[0, 1]"), "{e}");
        assert!(r.admit(f64::NAN).is_err());
        assert!(RewardBoundary::new(1.0, 0.0, BoundaryMode::Clip).is_err());
    }
}
