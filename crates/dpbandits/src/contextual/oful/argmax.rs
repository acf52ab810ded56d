//! The argmax the OFUL family runs: exactly the textbook scan
//! ([`OfulPolicy::argmax_reference`], every index computed in order, ties to the lowest index),
//! computed faster, and the proofs that it is the same action on every input (the tests below
//! check it on random and adversarial decision sets).
//!
//! * **Skip bound** ([`OfulPolicy::refresh_hot_copies`], [`OfulPolicy::argmax_block`]): per
//!   episode, a bound `B` with `sqrt(q) <= B ||a||`; an action whose `<theta~, a> + B ||a||` is
//!   below a cut that the final maximum reaches is skipped (no quadratic form, no square root).
//! * **Gap test** and **slope test** ([`OfulPolicy::sync_reference`]): on a round whose lanes
//!   carry a shared reference direction (`theta*` of a linear environment, `lanes.rs`), the
//!   reference's maximiser is this policy's argmax as soon as its gap (or its slope ratio)
//!   exceeds per-episode constants; such a round costs no look at the actions.
//!
//! The plain row form ([`OfulPolicy::argmax`], used by `choose`) transposes blocks of actions
//! on the stack; the lane form ([`OfulPolicy::lanes_argmax`], the run loop's batched driver)
//! reads the round's shared lanes.

use super::{MAX_DIM, OfulPolicy, SquareOps, infinity3};
use crate::contextual::ActionSet;
use crate::contextual::lanes::{ActionLanes, LANE_GROUP, LaneReference, fill_groups};
use crate::error::Result;
use nalgebra::SMatrix;
use std::cell::Cell;

impl<const D: usize> OfulPolicy<D>
where
    SMatrix<f64, D, D>: SquareOps,
{
    /// Refresh `w`, `th` and the skip bound `B` from `m` and `theta`.
    ///
    /// `B` bounds the computed `sqrt(max(q, 0))` of [`Self::parts`] by `B ||a||` with room to
    /// spare for the rounding of the skip test of [`Self::argmax_block`]
    /// (`lin + B ||a|| < c - k |c| - 1e-300`, `k = 1e-9`, `eps = 2^-53`):
    ///
    /// * Let `S` be the symmetric matrix whose upper triangle is `m`'s (the form
    ///   [`Self::parts`] evaluates; `w` is `m` with doubled, hence exact, off-diagonal entries),
    ///   `F = ||S||_F` and `L = max(lambda_max, 0) + k F`, with `lambda_max` the computed largest
    ///   eigenvalue of `S` (a backward-stable solver: within a few `eps F` of the true one).
    ///   The computed `q` is at most `a^T S a + 6 eps sum_ij |S_ij| |a_i| |a_j|
    ///   <= (lambda_max(S) + 6 eps F) ||a||^2 <= L ||a||^2`, so with `B0 = sqrt(L) (1 + k)` the
    ///   computed square root `s` is at most `B0 ||a||` (`||a||` computed within a few `eps`).
    /// * `B = B0 + k (B0 + ||theta~||) (1 + k)` leaves a slack `k (B0 + ||theta~||) ||a||`,
    ///   at least `k (s + |lin|)` (Cauchy-Schwarz) and at least `k B ||a|| / 2`. Every rounding
    ///   in the computed index `fl(lin + s)` and in the test's left side is a few `eps` times
    ///   `|lin| + s + B ||a||`, far below the slack; the right side is below `c` by `k |c|`
    ///   (and `1e-300` for the subnormal range), far more than its own rounding. So a skipped
    ///   action's computed index is strictly below `c`.
    ///
    /// A non-finite `B` (or a NaN anywhere in the test) skips nothing.
    ///
    /// It also sets `eps_s`, a relative error bound of the computed `s` against the exact
    /// `||a||_S = sqrt(a^T S a)` when `S` is positive definite: with `lmin` the computed
    /// smallest eigenvalue and `l = lmin - k F > 0` (below the true one), the computed `q` (a
    /// sum of products, each through at most `2d + 1` roundings) is within
    /// `(2d + 1) eps F ||a||^2 <= (2d + 1) eps (F / l) a^T S a` of the exact form, and the
    /// square root adds at most `2 eps`, so `|s - ||a||_S| <= eps_s ||a||_S` with
    /// `eps_s = 2 (d + 2) eps F / l + 4 eps` (taken only when `eps_s <= 1e-3`; otherwise `inf`,
    /// and the slope test of [`Self::sync_reference`] never passes).
    #[allow(clippy::needless_range_loop)]
    pub(super) fn refresh_hot_copies(&mut self) {
        for i in 0..D {
            self.th[i] = self.theta[i];
            for j in 0..D {
                self.w[i][j] = if j < i {
                    0.0
                } else if j == i {
                    self.m[(i, i)]
                } else {
                    2.0 * self.m[(i, j)]
                };
            }
        }
        let sym = SMatrix::<f64, D, D>::from_fn(|i, j| self.m[(i.min(j), i.max(j))]);
        let frob = sym.norm();
        let (lmin, lmax) = sym.lambda_range();
        let l = lmax.max(0.0) + CUT_MARGIN * frob;
        let b0 = l.sqrt() * (1.0 + CUT_MARGIN);
        let thn = self.theta.norm();
        let b = b0 + CUT_MARGIN * (b0 + thn) * (1.0 + CUT_MARGIN);
        self.bound = if b.is_finite() && lmax.is_finite() {
            b
        } else {
            f64::INFINITY
        };
        let eps = f64::EPSILON / 2.0;
        let lo = lmin - CUT_MARGIN * frob;
        let rel = 2.0 * (D as f64 + 2.0) * eps * frob / lo + 4.0 * eps;
        self.sq_rel = if lo > 0.0 && rel.is_finite() && rel <= 1e-3 {
            rel
        } else {
            f64::INFINITY
        };
        // The shared-reference constants depend on `th` and `B`: recompute them when next asked.
        self.ref_theta = [f64::NAN; D];
    }

    /// Make `ref_c` the constant of the shared-reference test for the direction `theta_ref`
    /// (recomputed only when the direction or the episode changes).
    ///
    /// **The test.** Given a round's [`LaneReference`] along `theta_ref` (`r_i`, `best`, `gap`,
    /// `max_norm` = `N`), if `gap > c N + 1e-300` with
    /// `c = (2 e (1 + k) + B)(1 + k) + k (||theta~|| + ||theta_ref|| + e + B)`,
    /// `e = ||theta~ - theta_ref||` and `k = 1e-9`, then `best` is the first maximiser of this
    /// policy's computed indices, so [`Self::argmax`] would return it.
    ///
    /// *Proof.* Write `lin_i` for the computed `<theta~, a_i>` and `v_i = fl(lin_i + s_i)` for
    /// the computed index (`0 <= s_i <= B ||a_i||`, [`Self::refresh_hot_copies`]). Exactly,
    /// `<theta~, a_i> = <theta_ref, a_i> + <theta~ - theta_ref, a_i>` and the last term is at
    /// most `e ||a_i||` in absolute value. Both computed inner products are within
    /// `d eps ||.|| ||a_i||` of the exact ones (`eps = 2^-53`), so, with
    /// `A = ||theta~|| + ||theta_ref|| + e + B` and `E` a few `d eps A N`:
    /// for `i != best`, `v_i <= r_i + (e + B) ||a_i|| + E <= r_best - gap + (e + B) N + E`;
    /// and `v_best >= lin_best >= r_best - e N - E` (rounding is monotone and `s >= 0`). So
    /// `v_best > v_i` as soon as `gap > (2e + B) N + 2E`, which the test implies: the computed
    /// `e`, `N`, `gap` and `c N` are within a few `eps` of their exact values, and the slack
    /// `k A N` (plus `1e-300` for the subnormal range) is a million times larger than every
    /// rounding term. `best` is then the strict maximiser, hence the first. A non-finite `c`,
    /// `N` or `gap` fails the test.
    ///
    /// **The slope test** (tried when the gap test fails; over a Figure 4(c) run of T = 1e6 it
    /// settles about 60% of the decisions the gap test leaves). With the round's `ratio2`
    /// (`R^2`, [`ActionLanes::ratio2`]) and the constants
    /// `c1 = (e + B)(1 + k)`, `c1^2 = c1 c1 (1 + k)`,
    /// `c2 = (2/k)((2d + 4) eps (||theta~|| + ||theta_ref|| + B) + 2 eps_s B)(1 + k)` and
    /// `c3 = (2/k)(e + B + 1) 1e-150`, if `gap > c2 N + c3` and `ratio2 > c1^2` then `best` is
    /// again this policy's first maximiser.
    ///
    /// *Proof.* Take `i != best`, `D_i = fl(r_best - r_i)`, which is at least `gap` (rounding is
    /// monotone), `dn_i = ||a_best - a_i||` exactly and `dn2_i` its computed square. `S` is
    /// positive definite (`eps_s` finite, [`Self::refresh_hot_copies`]), so `||.||_S` is a norm
    /// and `||a_i||_S - ||a_best||_S <= ||a_i - a_best||_S <= B dn_i`. Exactly,
    /// `<theta~, a_best - a_i> >= <theta_ref, a_best - a_i> - e dn_i`. Adding the rounding of
    /// the inner products (`d eps` relative to `||.|| N`), of `s` (`eps_s ||a||_S`, at most
    /// `eps_s B N`) and of the final sums, the computed indices satisfy
    /// `v_best - v_i >= D_i (1 - eps) - (e + B) dn_i - Err` with
    /// `Err = N ((2d + 4) eps (||theta~|| + ||theta_ref|| + B) + 2 eps_s B)`. Squared
    /// differences may underflow, so `dn_i <= sqrt(dn2_i)(1 + (d + 3) eps) + 1e-160`. As
    /// `gap > c3 >= 1e-150`, `fl(D_i^2)` is a normal number, so `R^2 <= fl(fl(D_i^2) / dn2_i)`
    /// gives `sqrt(dn2_i) <= D_i (1 + eps) / R`, and `R > c1 >= (e + B)(1 + k)`. Together,
    /// `v_best - v_i` is at least
    /// `D_i (1 - eps - (1 + (d + 5) eps) / (1 + k)) - (e + B) 1e-160 - Err`, hence at least
    /// `D_i k / 2 - (e + B) 1e-160 - Err`, which is positive: `D_i >= gap` and
    /// `gap k / 2 > (c2 N + c3) k / 2` exceeds both terms. So `v_best > v_i` for every `i`.
    /// The `(1 + k)` factors cover the rounding of the constants and of the test itself. A NaN
    /// or infinite constant, `ratio2` or `gap` fails the test (`ratio2 = inf` only for one
    /// action, whose `gap` is `inf` too).
    #[inline(always)]
    pub(super) fn sync_reference(&mut self, theta_ref: &[f64]) {
        if theta_ref.len() == D && theta_ref.iter().zip(&self.ref_theta).all(|(a, b)| a == b) {
            return;
        }
        self.set_reference(theta_ref);
    }

    /// [`Self::sync_reference`] for a new direction or episode (the constants' computation).
    #[inline(never)]
    fn set_reference(&mut self, theta_ref: &[f64]) {
        if theta_ref.len() != D {
            self.ref_c = f64::INFINITY;
            self.ref_slope = infinity3();
            return;
        }
        let (mut e2, mut t2, mut r2) = (0.0f64, 0.0f64, 0.0f64);
        for (&x, &y) in self.th.iter().zip(theta_ref) {
            e2 += (x - y) * (x - y);
            t2 += x * x;
            r2 += y * y;
        }
        let (e, b) = (e2.sqrt() * (1.0 + CUT_MARGIN), self.bound);
        let c = (2.0 * e * (1.0 + CUT_MARGIN) + b) * (1.0 + CUT_MARGIN)
            + CUT_MARGIN * (t2.sqrt() + r2.sqrt() + e + b);
        self.ref_c = if c.is_finite() { c } else { f64::INFINITY };
        let eps = f64::EPSILON / 2.0;
        let c1 = (e + b) * (1.0 + CUT_MARGIN);
        let c1sq = c1 * c1 * (1.0 + CUT_MARGIN);
        let c2 = (2.0 / CUT_MARGIN)
            * ((2.0 * D as f64 + 4.0) * eps * (t2.sqrt() + r2.sqrt() + b) + 2.0 * self.sq_rel * b)
            * (1.0 + CUT_MARGIN);
        let c3 = (2.0 / CUT_MARGIN) * (e + b + 1.0) * 1e-150;
        self.ref_slope = if c1sq.is_finite() && c2.is_finite() && c3.is_finite() {
            [c1sq, c2, c3]
        } else {
            infinity3()
        };
        self.ref_theta.copy_from_slice(theta_ref);
    }

    /// The choice on a round with a shared reference `r` (of `lanes`), with this policy's
    /// reference constants `ref_c` and `slope = [c1^2, c2, c3]` ([`Self::sync_reference`]):
    /// `r.best` when the gap test or the slope test proves it is the argmax; when only the
    /// slope test's gap condition holds, the textbook scan over the actions the slope screen
    /// keeps ([`Self::argmax_screened`]); otherwise [`Self::argmax_lanes`]. Always the action
    /// of [`Self::argmax_reference`].
    #[inline(always)]
    pub(super) fn choose_by_reference(
        &self,
        features: &[f64],
        lanes: &ActionLanes<'_>,
        r: &LaneReference<'_>,
        ref_c: f64,
        slope: [f64; 3],
    ) -> usize {
        if r.gap > ref_c * r.max_norm + 1e-300 {
            return r.best;
        }
        let [c1sq, c2, c3] = slope;
        if r.gap > c2 * r.max_norm + c3 {
            let ratio2 = lanes.ratio2();
            if ratio2 > c1sq {
                return r.best;
            }
            if !ratio2.is_nan() {
                return self.argmax_screened(features, lanes.ratios(), c1sq);
            }
        }
        self.argmax_lanes(features, lanes)
    }

    /// The textbook scan ([`Self::argmax_reference`]) over the actions whose own slope ratio
    /// `q_i` (shared, [`ActionLanes::ratios`]) is not above `c1^2`: on a round where the slope
    /// test's gap condition `gap > c2 N + c3` holds, the proof of [`Self::sync_reference`] run
    /// for one action `i` (with `q_i` in place of `R^2`) shows that `q_i > c1^2` puts `i`'s
    /// computed index strictly below `best`'s, so `i` is not the first maximiser; `best` itself
    /// (`q = NaN`) and exact ties are always scanned. The first maximiser of the scanned
    /// actions is therefore the textbook scan's.
    #[inline(never)]
    fn argmax_screened(&self, features: &[f64], ratios: &[Cell<f64>], c1sq: f64) -> usize {
        let mut best = (0usize, f64::NEG_INFINITY);
        for (i, (row, q)) in features.chunks_exact(D).zip(ratios).enumerate() {
            if q.get() > c1sq {
                continue;
            }
            let Ok(a) = <&[f64; D]>::try_from(row) else {
                continue;
            };
            let (l, qf) = self.parts(a);
            let v = l + qf.max(0.0).sqrt();
            if v > best.1 {
                best = (i, v);
            }
        }
        best.0
    }

    /// The argmax of a decision set given both ways: the shared-reference test
    /// ([`Self::sync_reference`]), then [`Self::argmax_lanes`]. A lane view that is not this
    /// decision set's transpose is ignored (the row scan [`Self::argmax`] is the same function).
    #[inline(always)]
    pub(super) fn lanes_argmax(
        &mut self,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
    ) -> usize {
        if lanes.d == D && lanes.k * D == actions.features.len() {
            if let Some(r) = &lanes.reference {
                self.sync_reference(r.theta);
                if r.best < lanes.k && lanes.ratios().len() == lanes.k {
                    let (c, slope) = (self.ref_c, self.ref_slope);
                    return self.choose_by_reference(actions.features, lanes, r, c, slope);
                }
            }
            self.argmax_lanes(actions.features, lanes)
        } else {
            self.argmax(actions.features)
        }
    }

    /// The optimistic action: `argmax_i <theta~, a_i> + sqrt(max(0, q_i))` over the rows of
    /// `features` (`q_i = beta~^2 ||a_i||^2_{V_tau^{-1}}`), ties to the lowest index: exactly
    /// the action of [`Self::argmax_reference`], which evaluates every index in order.
    /// Transposes the actions into lane groups on the stack, [`ARGMAX_BLOCK`] at a time, and
    /// runs [`Self::argmax_block`] on each block.
    #[inline]
    pub(super) fn argmax(&self, features: &[f64]) -> usize {
        let mut best = (0usize, f64::NEG_INFINITY);
        let mut buf = [0.0f64; (MAX_DIM + 1) * ARGMAX_BLOCK];
        for (b, block) in features.chunks(ARGMAX_BLOCK * D).enumerate() {
            let n = block.len() / D;
            fill_groups::<D>(block, &mut buf);
            let last = (b + 1) * ARGMAX_BLOCK * D >= features.len();
            self.argmax_block(block, &buf, b * ARGMAX_BLOCK, n, last, &mut best);
        }
        best.0
    }

    /// [`Self::argmax`] on a decision set given both ways (`lanes` is `features` transposed).
    /// Not inlined: with the shared-reference test in front of it, it is the slow path, and
    /// its stack frame would otherwise be set up on every decision.
    #[inline(never)]
    pub(super) fn argmax_lanes(&self, features: &[f64], lanes: &ActionLanes<'_>) -> usize {
        let size = (D + 1) * LANE_GROUP;
        let mut best = (0usize, f64::NEG_INFINITY);
        for (b, (groups, rows)) in lanes
            .groups
            .chunks(size * (ARGMAX_BLOCK / LANE_GROUP))
            .zip(features.chunks(ARGMAX_BLOCK * D))
            .enumerate()
        {
            let last = (b + 1) * ARGMAX_BLOCK >= lanes.k;
            self.argmax_block(
                rows,
                groups,
                b * ARGMAX_BLOCK,
                rows.len() / D,
                last,
                &mut best,
            );
        }
        best.0
    }

    /// Fold actions `first .. first + n` (`n <= ARGMAX_BLOCK`) into `best = (index, computed
    /// index value)`, the running first maximiser. The actions are given as rows (`rows`, `n`
    /// rows of `D`) and in lane groups as in [`ActionLanes`] (at least `ceil(n / LANE_GROUP)`
    /// groups of `(D + 1) * LANE_GROUP` numbers).
    ///
    /// 1. `lin_i = <theta~, a_i>` of every action, by groups (vectorised), and
    ///    `u_i = lin_i + B ||a_i||` with the per-episode bound `B` of
    ///    [`Self::refresh_hot_copies`].
    /// 2. The cut `c = max(best value so far, max_i lin_i)` is at most the final maximum: the
    ///    computed index of action `i` is `fl(lin_i + s_i) >= lin_i` (`s_i >= 0`, rounding is
    ///    monotone).
    /// 3. Action `i` is skipped when `u_i < c - 1e-9 |c| - 1e-300`: then its computed index is
    ///    strictly below `c` (proof at [`OfulPolicy::refresh_hot_copies`]), so it is not the
    ///    first maximiser.
    /// 4. Every other action, in index order, is evaluated exactly as the reference does (its
    ///    row, [`Self::parts`], `lin + q.max(0).sqrt()`) and replaces the best if strictly
    ///    larger: the reference's scan restricted to actions that can win. If only one action
    ///    survives in the only block (`last` and nothing before it), it is the answer without
    ///    any evaluation (all others are strictly below it); the value stored with it is then
    ///    NaN, unused.
    ///
    /// Late in a run `sqrt(q_i)` is small next to the spread of `lin_i` across actions, so
    /// usually one or two actions get the quadratic form and a square root.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // explicit indices over const bounds: vectorised
    fn argmax_block(
        &self,
        rows: &[f64],
        groups: &[f64],
        first: usize,
        n: usize,
        last: bool,
        best: &mut (usize, f64),
    ) {
        const G: usize = LANE_GROUP;
        let size = (D + 1) * G;
        let n = n.min(ARGMAX_BLOCK).min(rows.len() / D);
        let groups_n = n.div_ceil(G).min(groups.len() / size);
        // Aligned, so that the mask's loads meet the stores exactly (a load straddling two
        // stores stalls store forwarding).
        let mut upper = Aligned([f64::INFINITY; ARGMAX_BLOCK]);
        let mut top = [best.1; G];
        let bound = self.bound;
        for g in 0..groups_n {
            let grp = &groups[g * size..(g + 1) * size];
            let mut l4 = [0.0f64; G];
            for j in 0..D {
                for l in 0..G {
                    l4[l] += self.th[j] * grp[j * G + l];
                }
            }
            for l in 0..G {
                top[l] = if l4[l] > top[l] { l4[l] } else { top[l] };
                upper.0[(g * G + l) % ARGMAX_BLOCK] = l4[l] + bound * grp[D * G + l].sqrt();
            }
        }
        let mut cut = top[0];
        for &t in &top[1..] {
            cut = if t > cut { t } else { cut };
        }
        let cut = cut - CUT_MARGIN * cut.abs() - 1e-300;
        // A fixed-width mask (vectorises); lanes past `n` are cleared.
        let mut survivors = 0u32;
        for (i, &u) in upper.0.iter().enumerate() {
            // `!(u < cut)`, not `u >= cut`: a NaN bound survives.
            #[allow(clippy::neg_cmp_op_on_partial_ord)]
            let may_win = !(u < cut);
            survivors |= u32::from(may_win) << i;
        }
        survivors &= (1u32 << n) - 1;
        if survivors != 0 && survivors & (survivors - 1) == 0 && first == 0 && last {
            // One action can win and nothing else is compared with it: it is the answer.
            *best = (first + survivors.trailing_zeros() as usize, f64::NAN);
            return;
        }
        while survivors != 0 {
            let i = survivors.trailing_zeros() as usize;
            survivors &= survivors - 1;
            let Some(Ok(a)) = rows.get(i * D..(i + 1) * D).map(<&[f64; D]>::try_from) else {
                continue;
            };
            let (l, q) = self.parts(a);
            let v = l + q.max(0.0).sqrt();
            if v > best.1 {
                *best = (first + i, v);
            }
        }
    }

    /// [`ContextualPolicy::play`](crate::contextual::ContextualPolicy::play) on a round also
    /// given by coordinate (`lanes`, with its shared reference if any): the same action and
    /// state change, through [`Self::lanes_argmax`].
    ///
    /// # Errors
    /// As `play`.
    #[inline]
    pub(super) fn play_lanes(
        &mut self,
        actions: &ActionSet<'_>,
        lanes: &ActionLanes<'_>,
        means: &[f64],
        noise: f64,
    ) -> Result<usize> {
        self.play_with(actions, means, noise, |p| p.lanes_argmax(actions, lanes))
    }
}

/// A cache-line aligned array.
#[repr(C, align(64))]
struct Aligned<T>(T);

/// Actions per block of [`OfulPolicy::argmax`] (stack buffers: no allocation for any `k`).
const ARGMAX_BLOCK: usize = 16;

/// Relative margin of the skip test of [`OfulPolicy::argmax_block`] (on the cut, and on the
/// bound `B`): far above the few ulps of rounding it must cover (`~1e-15`), far below any gap
/// that matters for pruning.
const CUT_MARGIN: f64 = 1e-9;

#[cfg(test)]
mod tests {
    use super::super::{OfulConfig, OfulKind, PrivacyMode, state_of};
    use super::*;
    use crate::contextual::ContextualPolicy;
    use crate::rng::SimRng;
    use nalgebra::SVector;

    /// The fast argmax (rows and lanes) against the textbook scan: random policy states driven
    /// through real episodes, random and adversarial decision sets (exact ties, near-ties one
    /// ulp apart, NaN, zero and huge actions, every size around the block and group edges).
    fn check_argmax<const D: usize>(seed: u64, rounds: usize)
    where
        SMatrix<f64, D, D>: SquareOps,
    {
        use rand::{RngExt, SeedableRng};
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = SimRng::seed_from_u64(seed);
        let mut cfg = OfulConfig::paper(OfulKind::AdacOful, 1.0);
        cfg.mode = PrivacyMode::Reproduction;
        let mut pol = OfulPolicy::<D>::new(cfg, 1_000_000, seed).unwrap();
        let (mut buf, mut buf2) = (Vec::new(), Vec::new());
        let (mut checked, mut skipped_some, mut passed) = (0usize, false, 0usize);
        for round in 0..rounds {
            let k = [1, 2, 3, 4, 5, 7, 10, 15, 16, 17, 31, 33][rng.random_range(0..12)];
            let mut f: Vec<f64> = (0..k * D)
                .map(|_| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    0.5 + 0.3 * z
                })
                .collect();
            match round % 7 {
                // exact ties: copies of one action
                1 if k > 2 => {
                    let (a, b) = (rng.random_range(0..k), rng.random_range(0..k));
                    let row: Vec<f64> = f[a * D..(a + 1) * D].to_vec();
                    f[b * D..(b + 1) * D].copy_from_slice(&row);
                }
                // near-ties: one coordinate one ulp away
                2 if k > 2 => {
                    let (a, b) = (rng.random_range(0..k), rng.random_range(0..k));
                    let row: Vec<f64> = f[a * D..(a + 1) * D].to_vec();
                    f[b * D..(b + 1) * D].copy_from_slice(&row);
                    let j = b * D + rng.random_range(0..D);
                    f[j] = f64::from_bits(f[j].to_bits() + 1);
                }
                3 => {
                    let i = rng.random_range(0..k * D);
                    f[i] = [f64::NAN, 0.0, 1e150, -1e150, 1e-300][rng.random_range(0..5)];
                }
                4 => {
                    let i = rng.random_range(0..k);
                    f[i * D..(i + 1) * D].fill(0.0);
                }
                _ => {}
            }
            if pol.needs_update() {
                pol.update();
            }
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.argmax(&f), want, "rows, round {round}, k {k}: {f:?}");
            let set = ActionSet {
                d: D,
                k,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            assert_eq!(
                pol.argmax_lanes(&f, &lanes),
                want,
                "lanes, round {round}, k {k}"
            );
            // The shared-reference test in front, along directions at every distance from
            // theta~ (itself, a few ulps off, near, far, non-finite).
            let th = pol.th;
            let scale = [0.0, 1e-15, 1e-6, 1e-3, 1e-1, 1.0][rng.random_range(0..6)];
            let mut dir: Vec<f64> = th
                .iter()
                .map(|&x| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    x + scale * z
                })
                .collect();
            if round % 11 == 5 {
                dir[rng.random_range(0..D)] = [f64::NAN, f64::INFINITY][rng.random_range(0..2)];
            }
            let with_ref = ActionLanes::transpose_with_reference(&set, &mut buf2, &dir);
            let r = with_ref.reference.clone().expect("a reference of length d");
            assert_eq!(
                pol.lanes_argmax(&set, &with_ref),
                want,
                "reference at {scale}, round {round}, k {k}: {r:?}"
            );
            passed += usize::from(r.gap > pol.ref_c * r.max_norm + 1e-300);
            checked += 1;
            // Drive the policy on with finite actions so its state (episodes, radius) evolves.
            if f.iter().all(|x| x.is_finite() && x.abs() < 1e3) {
                let i = pol.decide(|p| p.lanes_argmax(&set, &lanes));
                assert_eq!(i, want);
                let r: f64 = StandardNormal.sample(&mut rng);
                pol.observe(&set, i, r).unwrap();
            }
            skipped_some |= pol.bound.is_finite();
        }
        assert_eq!(checked, rounds);
        assert!(skipped_some, "the skip bound was never finite");
        assert!(
            passed > rounds / 20,
            "the reference test passed {passed} times"
        );
    }

    #[test]
    fn argmax_is_the_reference_scan() {
        check_argmax::<1>(1, 3_000);
        check_argmax::<2>(2, 3_000);
        check_argmax::<3>(3, 20_000);
        check_argmax::<5>(5, 3_000);
        check_argmax::<16>(16, 1_000);
    }

    /// The skip test's margins: an action whose index is within a few ulps of the best (above
    /// or below) is chosen exactly as the reference chooses.
    #[test]
    fn skip_bound_is_exact_at_the_edge() {
        let mut cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        cfg.mode = PrivacyMode::Guaranteed;
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        // A frozen state: theta~ = e_1, m = 1e-6 I.
        pol.theta = SVector::<f64, 3>::new(1.0, 0.0, 0.0);
        pol.m = SMatrix::<f64, 3, 3>::identity() * 1e-6;
        pol.refresh_hot_copies();
        assert!(pol.bound > 1e-3 && pol.bound < 1.1e-3, "{}", pol.bound);
        let mut buf = Vec::new();
        for ulps in 0..64u64 {
            // action 0: index 1 + 1e-3; action 1: lin chosen so that its index is within
            // `ulps` of action 0's from below or above.
            let best = 1.0 + 1e-3;
            let lin1 = f64::from_bits((best - 1e-3 * 0.5f64.sqrt()).to_bits() + ulps);
            let f = [1.0, 0.0, 0.0, lin1, 0.0, 0.5f64.sqrt(), 0.0, 0.0, 0.0];
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.argmax(&f), want, "{ulps}");
            let set = ActionSet {
                d: 3,
                k: 3,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            assert_eq!(pol.argmax_lanes(&f, &lanes), want, "{ulps}");
            // The shared-reference test along theta~ itself (e = 0): the gap is the lin gap.
            let th = pol.th;
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "{ulps} (reference)");
        }
    }

    /// The gap at which the shared-reference test starts to pass is above `B ||a||` by no more
    /// than its margins, and the test never passes below it.
    #[test]
    fn reference_test_edge() {
        let mut cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        cfg.mode = PrivacyMode::Guaranteed;
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        pol.theta = SVector::<f64, 3>::new(1.0, 0.0, 0.0);
        pol.m = SMatrix::<f64, 3, 3>::identity() * 1e-6;
        pol.refresh_hot_copies();
        let b = pol.bound;
        let mut buf = Vec::new();
        let th = pol.th;
        // Two unit actions along e_1 with values 1 and 1 - g: the policy's true indices are
        // 1 + 1e-3 and 1 - g + 1e-3, so action 0 wins for every g > 0, but the test may only
        // claim it when g exceeds its bound (2e + B) N = B.
        let mut passes = vec![];
        for g in [0.5 * b, 0.999 * b, 1.001 * b, 1.01 * b, 2.0 * b] {
            let f = [1.0, 0.0, 0.0, 1.0 - g, 0.0, 0.0];
            let set = ActionSet {
                d: 3,
                k: 2,
                features: &f,
            };
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            let r = lanes.reference.clone().unwrap();
            assert_eq!(r.best, 0);
            pol.sync_reference(&th);
            passes.push(r.gap > pol.ref_c * r.max_norm + 1e-300);
            assert_eq!(pol.lanes_argmax(&set, &lanes), 0);
        }
        assert_eq!(passes, [false, false, true, true, true]);
    }

    /// Whether the slope test alone (not the gap test) passes for `lanes`.
    fn slope_only(pol: &OfulPolicy<3>, lanes: &ActionLanes<'_>) -> bool {
        let r = lanes.reference.as_ref().unwrap();
        let [c1sq, c2, c3] = pol.ref_slope;
        r.gap <= pol.ref_c * r.max_norm + 1e-300
            && r.gap > c2 * r.max_norm + c3
            && lanes.ratio2() > c1sq
    }

    /// The slope test on late-run states (small radius, `S` of condition number up to 1e6,
    /// `theta~` at distances 0 to 1e-2 from the reference direction), on the paper's decision
    /// sets and on adversarial ones (exact and one-ulp copies of the reference maximiser, an
    /// action on the ray through it): the choice is always the textbook scan's, and the slope
    /// test alone settles a good share of the decisions.
    #[test]
    fn slope_test_is_exact_on_late_states() {
        use rand::{RngExt, SeedableRng};
        use rand_distr::{Distribution, StandardNormal};
        let mut rng = SimRng::seed_from_u64(12);
        let cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        let mut buf = Vec::new();
        let normal = |rng: &mut SimRng| -> f64 { StandardNormal.sample(rng) };
        let (mut slope, mut screened, rounds) = (0usize, 0usize, 30_000usize);
        let theta_ref = [0.6, -0.48, 0.64];
        for round in 0..rounds {
            if round % 50 == 0 {
                // A random state: m = scale * Q diag(1, c, c^2) Q^T (Q from a QR of a Gaussian).
                let g = SMatrix::<f64, 3, 3>::from_fn(|_, _| normal(&mut rng));
                let q = g.qr().q();
                let c = 10f64.powf(-rng.random_range(0.0..3.0));
                let scale = 10f64.powf(-rng.random_range(2.0..8.0));
                let diag =
                    SMatrix::<f64, 3, 3>::from_diagonal(&SVector::<f64, 3>::new(1.0, c, c * c));
                pol.m = q * diag * q.transpose() * scale;
                let e = [0.0, 1e-9, 1e-5, 1e-3, 1e-2][rng.random_range(0..5)];
                pol.theta = SVector::<f64, 3>::from_fn(|j, _| theta_ref[j] + e * normal(&mut rng));
                pol.refresh_hot_copies();
            }
            let k = [2, 3, 4, 5, 10, 17, 33][rng.random_range(0..7)];
            let m = 1.0 / 3f64.sqrt();
            let mut f: Vec<f64> = (0..k * 3)
                .map(|_| m + 0.1f64.sqrt() * normal(&mut rng))
                .collect();
            let vals: Vec<f64> = f
                .chunks_exact(3)
                .map(|a| a.iter().zip(&theta_ref).map(|(x, t)| x * t).sum())
                .collect();
            let best = (0..k).fold(0, |b, i| if vals[i] > vals[b] { i } else { b });
            let other = (best + 1 + rng.random_range(0..k - 1)) % k;
            let ab: Vec<f64> = f[best * 3..best * 3 + 3].to_vec();
            match round % 5 {
                // an exact copy of the maximiser
                1 => f[other * 3..other * 3 + 3].copy_from_slice(&ab),
                // one ulp off the maximiser in one coordinate
                2 => {
                    f[other * 3..other * 3 + 3].copy_from_slice(&ab);
                    let j = other * 3 + rng.random_range(0..3);
                    f[j] = f64::from_bits(f[j].to_bits() + rng.random_range(1..3));
                }
                // on the ray through the maximiser, a hair shorter or longer
                3 => {
                    let t = 1.0 + rng.random_range(-1e-3..1e-3);
                    for j in 0..3 {
                        f[other * 3 + j] = ab[j] * t;
                    }
                }
                _ => {}
            }
            let set = ActionSet {
                d: 3,
                k,
                features: &f,
            };
            let want = pol.argmax_reference(&f);
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &theta_ref);
            pol.sync_reference(&theta_ref);
            slope += usize::from(slope_only(&pol, &lanes));
            let r = lanes.reference.as_ref().unwrap();
            let [c1sq, c2, c3] = pol.ref_slope;
            screened += usize::from(
                r.gap <= pol.ref_c * r.max_norm + 1e-300
                    && r.gap > c2 * r.max_norm + c3
                    && lanes.ratio2() <= c1sq,
            );
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "round {round}: {f:?}");
        }
        assert!(screened > 200, "the screened scan ran {screened} times");
        assert!(
            slope > rounds / 20,
            "the slope test alone passed {slope} times"
        );
    }

    /// The slope test's edge: two actions on one ray, `a_0 = -e_1` and `a_1 = (1 + t) a_0`,
    /// `S = s I`, `theta_ref = w e_1` and `theta~ = (w - e) e_1` (the estimate's error favours
    /// `a_1`). Then `D / dn = w` and the policy's true margin is
    /// `v_0 - v_1 = t (w - e - sqrt s)`: `a_0` wins exactly when `w > e + sqrt s`. The test
    /// passes just above its constant `(e + B)(1 + 1e-9)`, never where `a_1` wins, and the
    /// choice is always the textbook scan's.
    #[test]
    fn slope_test_edge() {
        let cfg = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
        let mut pol = OfulPolicy::<3>::new(cfg, 1000, 1).unwrap();
        let (s, e, t): (f64, f64, f64) = (1e-6, 1e-4, 0.01);
        let f = [-1.0, 0.0, 0.0, -(1.0 + t), 0.0, 0.0];
        let set = ActionSet {
            d: 3,
            k: 2,
            features: &f,
        };
        let edge = e + s.sqrt();
        let mut buf = Vec::new();
        let (mut passes, mut chosen) = (vec![], vec![]);
        for q in [0.5, 0.999, 0.999_999, 1.01, 2.0] {
            let w = q * edge;
            let th = [w, 0.0, 0.0];
            pol.theta = SVector::<f64, 3>::new(w - e, 0.0, 0.0);
            pol.m = SMatrix::<f64, 3, 3>::identity() * s;
            pol.refresh_hot_copies();
            let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &th);
            pol.sync_reference(&th);
            passes.push(slope_only(&pol, &lanes));
            let want = pol.argmax_reference(&f);
            assert_eq!(pol.lanes_argmax(&set, &lanes), want, "{q}");
            chosen.push(want);
        }
        assert_eq!(chosen, [1, 1, 1, 0, 0]);
        assert_eq!(passes, [false, false, false, true, true]);
    }

    /// `play_lanes` (the batched driver's fused round) and `play` (the per-policy path's) are
    /// `choose` then `observe`: the same actions and, at the end, the same state, for every
    /// family member and both privacy modes.
    #[test]
    fn play_is_choose_then_observe() {
        use rand::SeedableRng;
        use rand_distr::{Distribution, StandardNormal};
        for (kind, rho, mode) in [
            (OfulKind::Oful, f64::INFINITY, PrivacyMode::Guaranteed),
            (OfulKind::RsOful, f64::INFINITY, PrivacyMode::Guaranteed),
            (OfulKind::AdacOful, 1.0, PrivacyMode::Guaranteed),
            (OfulKind::AdacOful, 0.1, PrivacyMode::Reproduction),
        ] {
            let mut cfg = OfulConfig::paper(kind, rho);
            cfg.mode = mode;
            let mut a = OfulPolicy::<3>::new(cfg.clone(), 5000, 9).unwrap();
            let mut b = OfulPolicy::<3>::new(cfg.clone(), 5000, 9).unwrap();
            let mut c = OfulPolicy::<3>::new(cfg, 5000, 9).unwrap();
            let mut rng = SimRng::seed_from_u64(3);
            let theta = [0.6, -0.48, 0.64];
            let mut buf = Vec::new();
            for t in 0..5000u64 {
                let f: Vec<f64> = (0..30)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        0.577 + 0.316 * z
                    })
                    .collect();
                let means: Vec<f64> = f
                    .chunks_exact(3)
                    .map(|x| x.iter().zip(&theta).map(|(x, t)| x * t).sum())
                    .collect();
                let eta: f64 = StandardNormal.sample(&mut rng);
                let set = ActionSet {
                    d: 3,
                    k: 10,
                    features: &f,
                };
                let lanes = ActionLanes::transpose_with_reference(&set, &mut buf, &theta);
                let i = a.play_lanes(&set, &lanes, &means, eta).unwrap();
                let j = b.choose(t, &set);
                b.observe(&set, j, means[j] + eta).unwrap();
                let l = c.play(t, &set, &means, eta).unwrap();
                assert_eq!((i, l), (j, j), "{kind:?} round {t}");
            }
            assert_eq!(state_of(&a), state_of(&b), "{kind:?}");
            assert_eq!(state_of(&c), state_of(&b), "{kind:?}");
            // A refused reward leaves the round open, as a failed observe does.
            let f = [1.0; 30];
            let set = ActionSet {
                d: 3,
                k: 10,
                features: &f,
            };
            let lanes = ActionLanes::transpose(&set, &mut buf);
            let means = [f64::NAN; 10];
            assert!(a.play_lanes(&set, &lanes, &means, 0.0).is_err());
            assert!(c.play(0, &set, &means, 0.0).is_err());
            let j = b.choose(0, &set);
            assert!(b.observe(&set, j, f64::NAN).is_err());
            for x in [&a, &c] {
                assert_eq!(state_of(x), state_of(&b), "{kind:?} after a refusal");
            }
            // No mean for the chosen action: an error, not a panic.
            assert!(a.play_lanes(&set, &lanes, &[], 0.0).is_err());
            assert!(c.play(0, &set, &[], 0.0).is_err());
        }
    }
}
