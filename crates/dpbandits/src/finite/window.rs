//! Sliding-window statistics: a ring buffer of the last `w` (arm, value) pairs with per-arm
//! running counts and sums (spec ldp §2.4 item 5). O(1) per step; invariant
//! `sum_a N_a(t, w) = min(t, w)`.
//!
//! The buffer is preallocated with `min(w, 65536)` slots and grows geometrically only while it holds
//! fewer than `w` entries (at most `log2(w / 65536)` reallocations in a whole run; none once full),
//! so a window `w >= T` (the kl-UCB-CF limit) does not reserve `w` slots up front.

use crate::error::{Error, Result};

/// Per-arm counts and sums over the last `w` rounds.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SlidingWindow {
    w: u64,
    buf: Vec<(u32, f64)>,
    head: usize,
    counts: Vec<u64>,
    sums: Vec<f64>,
}

impl SlidingWindow {
    /// A window of `w >= 1` rounds over `k` arms.
    pub fn new(k: usize, w: u64) -> Result<Self> {
        if w == 0 {
            return Err(Error::param(
                "window",
                0,
                "an integer >= 1 (rounds in the sliding window)",
            ));
        }
        Ok(SlidingWindow {
            w,
            buf: Vec::with_capacity(w.min(1 << 16) as usize),
            head: 0,
            counts: vec![0; k],
            sums: vec![0.0; k],
        })
    }

    /// Window length `w`.
    pub fn len_limit(&self) -> u64 {
        self.w
    }

    /// Record one round; the oldest round leaves once the window is full.
    #[inline]
    pub fn push(&mut self, arm: usize, x: f64) {
        if (self.buf.len() as u64) < self.w {
            self.buf.push((arm as u32, x));
        } else {
            let (old_arm, old_x) = self.buf[self.head];
            let o = old_arm as usize;
            self.counts[o] -= 1;
            self.sums[o] -= old_x;
            if self.counts[o] == 0 {
                // no drift: an empty arm has sum exactly 0
                self.sums[o] = 0.0;
            }
            self.buf[self.head] = (arm as u32, x);
            self.head += 1;
            if self.head == self.buf.len() {
                self.head = 0;
            }
        }
        self.counts[arm] += 1;
        self.sums[arm] += x;
    }

    /// `N_a(t, w)`.
    #[inline]
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// Sum of the values of `a` in the window.
    #[inline]
    pub fn sums(&self) -> &[f64] {
        &self.sums
    }

    /// Rounds currently in the window, `min(t, w)`.
    pub fn filled(&self) -> u64 {
        self.buf.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Stream, stream_rng};
    use rand::RngExt;

    /// Spec ldp §7.3.1: ring-buffer statistics equal a brute-force recomputation on random streams,
    /// and the counts sum to min(t, w).
    #[test]
    fn matches_brute_force() {
        let mut rng = stream_rng(3, Stream::Policy, &[]);
        for &w in &[1u64, 2, 7, 50, 1000] {
            let k = 4;
            let mut sw = SlidingWindow::new(k, w).unwrap();
            let mut hist: Vec<(usize, f64)> = vec![];
            for t in 1..=600u64 {
                let a = rng.random_range(0..k);
                let x = f64::from(rng.random::<bool>());
                sw.push(a, x);
                hist.push((a, x));
                let start = hist.len().saturating_sub(w as usize);
                for arm in 0..k {
                    let (n, s) = hist[start..]
                        .iter()
                        .filter(|h| h.0 == arm)
                        .fold((0u64, 0.0), |(n, s), h| (n + 1, s + h.1));
                    assert_eq!(sw.counts()[arm], n);
                    assert_eq!(sw.sums()[arm], s);
                }
                assert_eq!(sw.counts().iter().sum::<u64>(), t.min(w));
            }
        }
        assert!(SlidingWindow::new(2, 0).is_err());
    }
}
