//! The tree-based (binary) mechanism for a **Gram matrix** `sum_s v_s v_s^T`, for private
//! contexts (Joint DP): Shariff & Sheffet 2018, Sec. 4 (the tree-based algorithm over the
//! `(d+1) x (d+1)` matrices `[x; y][x; y]^T`, Gaussian noise variant), in zCDP form.
//!
//! # Mechanism
//! Each element is a vector `v` with `||v||_2^2 <= B` (`B` public: the bound `L~^2` of Shariff &
//! Sheffet; `2` for a row `(w, r)` with `||w|| <= 1`, `|r| <= 1`). Replacing one element by another
//! (the joint neighbour relation: one user's context and reward changed) moves its rank-one
//! matrix by `||v v^T - u u^T||_F^2 = ||v||^4 + ||u||^4 - 2 <v, u>^2 <= 2 B^2`, with equality for
//! orthogonal `v`, `u` of squared norm `B` (e.g. `(a, 1)` against `(a, -1)` or `(-a, 1)` for a
//! unit `a`). Each p-sum of Chan, Shi & Song Alg. 2 is released as its upper triangle with
//! independent noise, `N(0, sigma^2)` off the diagonal and `N(0, 2 sigma^2)` on it: the
//! symmetrised Gaussian `(Z + Z^T) / sqrt 2`, `Z_ij ~ N(0, sigma^2)` i.i.d., whose density is
//! `exp(-||N||_F^2 / (4 sigma^2))`. Its zCDP is `Delta_F^2 / (4 sigma^2)` (the Gaussian mechanism
//! in the Frobenius geometry, Bun & Steinke 2016 Prop. 1.6; per coordinate:
//! `sum_i D_ii^2 / (2 * 2 sigma^2) + sum_{i<j} D_ij^2 / (2 sigma^2) = ||D||_F^2 / (4 sigma^2)`), so
//! `sigma^2 = 2 B^2 L / (4 rho) = B^2 L / (2 rho)` makes every release `rho / L`-zCDP; an element
//! enters at most `L = ceil(log2 T) + 1` p-sums (Chan, Shi & Song Thm 3.5) and the `L` releases
//! compose to `rho` (Bun & Steinke Lemma 2.3). Past its `2^(L-1)` positions the tree restarts
//! (each element still in at most `L` releases).
//!
//! # Deployment path
//! Each element is put on the grid `2^-g` (`g` the noise source's `grid_bits`) by truncation
//! toward zero, `V = trunc(2^g v)`, so `||V||^2 <= 2^(2g) B` (checked exactly; a coordinate is
//! moved toward zero until it holds); the p-sums `sum V V^T` are exact integers. One element
//! replaced moves a p-sum by at most `2 B_Z^2` in squared Frobenius norm, `B_Z = floor(2^(2g) B)`;
//! each coordinate gets the discrete Gaussian `N_Z(0, s^2)`, `s^2 = B_Z^2 L / (2 rho)` off the
//! diagonal and `2 s^2` on it (exact rationals, CKS20 Alg. 3; CKS20 Thm 4: each coordinate's Renyi
//! divergence is at most the continuous one, and they add), from the OS-keyed generator of the
//! [`NoiseSource`]; released `(U + Y) / 2^(2g)`.

use super::discrete::Ratio;
use super::{NoiseSource, tap};
use crate::error::{Error, Result};
use num_bigint::BigUint;
use rand_distr::Distribution;
use serde::{Deserialize, Serialize};

/// The binary mechanism for `sum_s v_s v_s^T` (module docs), rho-zCDP under the replacement of
/// one element.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GramTree {
    levels: u32,
    rho: f64,
    /// Matrix dimension `n`.
    n: usize,
    /// The public bound `B` on `||v||^2`.
    bound2: f64,
    count: u64,
    /// Raw p-sums, packed upper triangles (simulation path).
    raw: Vec<Option<Vec<f64>>>,
    /// Raw p-sums in units of `2^-(2g)`, packed (deployment path).
    exact: Vec<Option<Vec<i128>>>,
    released: Vec<Option<Vec<f64>>>,
    base: Vec<f64>,
    base_terms: u64,
    releases: u64,
}

/// `n (n + 1) / 2`: the packed upper triangle's length.
pub fn packed_len(n: usize) -> usize {
    n * (n + 1) / 2
}

impl GramTree {
    /// A tree of `levels` levels for `n x n` Gram matrices of vectors with `||v||^2 <= bound2`,
    /// at `rho` per element.
    ///
    /// # Errors
    /// `levels` outside `1..=63`, `rho` not `> 0`, `bound2` not in `(0, 4]` or not a power of 2
    /// (so that the deployment bound is exact), `n` outside `1..=257`.
    pub fn new(levels: u32, rho: f64, n: usize, bound2: f64) -> Result<Self> {
        if !(1..=63).contains(&levels) {
            return Err(Error::param("levels", levels, "an integer in 1..=63"));
        }
        if rho.is_nan() || rho <= 0.0 {
            return Err(Error::param("rho", rho, "a number > 0 (or inf)"));
        }
        if !(bound2 > 0.0 && bound2 <= 4.0 && bound2.log2().fract() == 0.0) {
            return Err(Error::param("bound2", bound2, "a power of 2 in (0, 4]"));
        }
        if !(1..=257).contains(&n) {
            return Err(Error::param("n", n, "an integer in 1..=257"));
        }
        let l = levels as usize;
        Ok(GramTree {
            levels,
            rho,
            n,
            bound2,
            count: 0,
            raw: vec![None; l],
            exact: vec![None; l],
            released: vec![None; l],
            base: vec![0.0; packed_len(n)],
            base_terms: 0,
            releases: 0,
        })
    }

    /// Positions per tree, `2^(L-1)`.
    pub fn capacity(&self) -> u64 {
        1u64 << (self.levels - 1)
    }

    /// Releases made so far (one per element).
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// The per-node off-diagonal noise scale `sigma = B sqrt(L / (2 rho))` (0 at `rho = inf`);
    /// the diagonal's is `sqrt 2` times it.
    pub fn sigma(&self) -> f64 {
        if self.rho.is_infinite() {
            0.0
        } else {
            self.bound2 * (self.levels as f64 / (2.0 * self.rho)).sqrt()
        }
    }

    /// The number of releases [`Self::matrix`] sums (its noise is a sum of that many node
    /// noises).
    pub fn terms(&self) -> u64 {
        self.base_terms + self.released.iter().flatten().count() as u64
    }

    /// Add `v v^T` (`||v||^2 <= bound2`) and release the p-sum it completes.
    ///
    /// # Errors
    /// `v` of another length, non-finite or too long; noise beyond `i128` (deployment). The tree
    /// is unchanged on error.
    pub fn push(&mut self, v: &[f64], noise: &mut NoiseSource) -> Result<()> {
        let norm2: f64 = v.iter().map(|x| x * x).sum();
        if v.len() != self.n || !norm2.is_finite() || norm2 > self.bound2 * (1.0 + 1e-12) {
            return Err(Error::param(
                "v",
                format!("{v:?}"),
                format!(
                    "{} finite numbers of squared norm at most {}",
                    self.n, self.bound2
                ),
            ));
        }
        let t = self.count + 1;
        let i = t.trailing_zeros() as usize;
        let sigma = self.sigma();
        let (value, raw, exact) = if let Some(rng) = noise.simulation_rng() {
            let mut alpha = outer_packed(v);
            for r in self.raw[..i].iter().flatten() {
                alpha.iter_mut().zip(r).for_each(|(a, b)| *a += b);
            }
            let mut value = alpha.clone();
            for (p, x) in value.iter_mut().enumerate() {
                let s = if is_diagonal(self.n, p) {
                    sigma * std::f64::consts::SQRT_2
                } else {
                    sigma
                };
                if s > 0.0 {
                    let z: f64 = rand_distr::StandardNormal.sample(rng);
                    *x += s * z;
                }
                tap::record(tap::Family::Gaussian, *x);
            }
            (value, Some(alpha), None)
        } else {
            let g = noise.grid_bits();
            let scale = 2f64.powi(g as i32);
            let bz = (self.bound2 * scale * scale) as i128; // exact: a power of 2
            let mut w: Vec<i128> = v.iter().map(|x| (x * scale).trunc() as i128).collect();
            while w.iter().map(|x| x * x).sum::<i128>() > bz {
                let j = (0..w.len()).max_by_key(|&j| w[j].abs()).unwrap_or(0);
                w[j] -= w[j].signum();
            }
            let mut acc = outer_packed_int(&w);
            for r in self.exact[..i].iter().flatten() {
                acc.iter_mut().zip(r).for_each(|(a, b)| *a += b);
            }
            let sigma2 = self.deployment_variances(bz)?;
            let noisy = noise.discrete_gaussian_add(&acc, &sigma2)?;
            let unit = scale * scale;
            let value: Vec<f64> = noisy.iter().map(|&q| q as f64 / unit).collect();
            for x in &value {
                tap::record(tap::Family::Gaussian, *x);
            }
            (value, None, Some(acc))
        };
        for j in 0..i {
            self.raw[j] = None;
            self.exact[j] = None;
            self.released[j] = None;
        }
        self.raw[i] = raw;
        self.exact[i] = exact;
        self.released[i] = Some(value.clone());
        self.count = t;
        self.releases += 1;
        if self.count == self.capacity() {
            self.base.iter_mut().zip(&value).for_each(|(a, b)| *a += b);
            self.base_terms += 1;
            self.count = 0;
            self.raw.iter_mut().for_each(|x| *x = None);
            self.exact.iter_mut().for_each(|x| *x = None);
            self.released.iter_mut().for_each(|x| *x = None);
        }
        Ok(())
    }

    /// The deployment variances in grid units: `s^2 = B_Z^2 L / (2 rho)` off the diagonal,
    /// `2 s^2` on it.
    fn deployment_variances(&self, bz: i128) -> Result<Vec<Ratio>> {
        let rho = Ratio::from_f64(self.rho)
            .filter(|_| self.rho.is_finite())
            .ok_or_else(|| {
                Error::param("rho", self.rho, "a finite budget on the deployment path")
            })?;
        let b2 = BigUint::from(bz.unsigned_abs()) * BigUint::from(bz.unsigned_abs());
        let off = Ratio::integer(b2 * BigUint::from(self.levels))
            .div(&rho.mul(&Ratio::integer(2u32)))
            .ok_or_else(|| Error::param("rho", self.rho, "a number > 0"))?;
        let diag = off.mul(&Ratio::integer(2u32));
        Ok((0..packed_len(self.n))
            .map(|p| {
                if is_diagonal(self.n, p) {
                    diag.clone()
                } else {
                    off.clone()
                }
            })
            .collect())
    }

    /// The released matrix `sum_s v_s v_s^T + noise` so far, full and row-major (post-processing
    /// of the cached releases).
    pub fn matrix(&self) -> Vec<f64> {
        let mut packed = self.base.clone();
        for r in self.released.iter().flatten() {
            packed.iter_mut().zip(r).for_each(|(a, b)| *a += b);
        }
        let n = self.n;
        let mut m = vec![0.0; n * n];
        let mut p = 0;
        for i in 0..n {
            for j in i..n {
                m[i * n + j] = packed[p];
                m[j * n + i] = packed[p];
                p += 1;
            }
        }
        m
    }
}

/// Whether packed position `p` of an `n x n` upper triangle is on the diagonal.
fn is_diagonal(n: usize, p: usize) -> bool {
    let mut start = 0;
    for i in 0..n {
        if p == start {
            return true;
        }
        start += n - i;
        if p < start {
            return false;
        }
    }
    false
}

fn outer_packed(v: &[f64]) -> Vec<f64> {
    let mut out = Vec::with_capacity(packed_len(v.len()));
    for (i, vi) in v.iter().enumerate() {
        out.extend(v[i..].iter().map(|vj| vi * vj));
    }
    out
}

fn outer_packed_int(v: &[i128]) -> Vec<i128> {
    let mut out = Vec::with_capacity(packed_len(v.len()));
    for (i, vi) in v.iter().enumerate() {
        out.extend(v[i..].iter().map(|vj| vi * vj));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::NoiseKind;

    /// The calibration: per node `Delta_F^2 / (4 sigma^2) = rho / L` at the worst replacement
    /// (`2 B^2`), exact prefix sums at `rho = inf`, the diagonal's scale `sqrt 2` times the
    /// off-diagonal's (empirically, 4000 nodes: within 10%), the deployment path near the truth.
    #[test]
    fn calibration_and_sums() {
        let t = GramTree::new(4, 0.5, 3, 2.0).unwrap();
        let s2 = t.sigma() * t.sigma();
        assert!((2.0 * 4.0 / (4.0 * s2) - 0.5 / 4.0).abs() < 1e-12, "{s2}");
        let mut exact = GramTree::new(5, f64::INFINITY, 2, 2.0).unwrap();
        let mut noise = NoiseSource::new(NoiseKind::Simulation, 20, 1).unwrap();
        let mut truth = [0.0; 4];
        for k in 0..20 {
            let v = [((k % 3) as f64 - 1.0) * 0.5, 1.0];
            exact.push(&v, &mut noise).unwrap();
            for (p, x) in truth.iter_mut().enumerate() {
                *x += v[p / 2] * v[p % 2];
            }
            let m = exact.matrix();
            for p in 0..4 {
                assert!((m[p] - truth[p]).abs() < 1e-9, "{m:?} {truth:?}");
            }
        }
        assert!(exact.push(&[1.0, 1.0 + 1e-6], &mut noise).is_err());
        assert!(exact.push(&[1.0], &mut noise).is_err());
        // empirical scales, one node each (levels = 1: every element is its own p-sum)
        let mut one = GramTree::new(1, 1.0, 2, 1.0).unwrap();
        let (mut d, mut o) = (0.0, 0.0);
        let n = 4000;
        for _ in 0..n {
            let before = one.matrix();
            one.push(&[0.0, 0.0], &mut noise).unwrap();
            let after = one.matrix();
            d += (after[0] - before[0]).powi(2);
            o += (after[1] - before[1]).powi(2);
        }
        let (sd, so) = ((d / n as f64).sqrt(), (o / n as f64).sqrt());
        assert!((so / one.sigma() - 1.0).abs() < 0.1, "{so}");
        assert!((sd / (one.sigma() * 2f64.sqrt()) - 1.0).abs() < 0.1, "{sd}");
        // deployment: near the truth (8 sigma over the terms)
        let mut dep = GramTree::new(6, 2.0, 2, 2.0).unwrap();
        let mut dn = NoiseSource::new(NoiseKind::Deployment, 20, 0).unwrap();
        for _ in 0..10 {
            dep.push(&[0.6, -0.8], &mut dn).unwrap();
        }
        let m = dep.matrix();
        let bound = 8.0 * dep.sigma() * 2f64.sqrt() * (dep.terms() as f64).sqrt();
        for (x, want) in m.iter().zip([3.6, -4.8, -4.8, 6.4]) {
            assert!((x - want).abs() < bound, "{m:?}");
        }
        assert!(is_diagonal(3, 0) && is_diagonal(3, 3) && is_diagonal(3, 5));
        assert!(!is_diagonal(3, 1) && !is_diagonal(3, 4));
    }
}
