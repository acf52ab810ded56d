//! The tree-based (binary) mechanism for the continual release of prefix sums, and the hybrid
//! mechanism for streams of unknown length.
//!
//! # The binary mechanism
//! Dwork, Naor, Pitassi & Rothblum (STOC 2010), "Differential privacy under continual
//! observation", Sec. 4 (the counter over dyadic intervals); Chan, Shi & Song (ICALP 2010 / ACM
//! TISSEC 2011), "Private and continual release of statistics", **Algorithm 2** (the binary
//! mechanism B). A stream `x_1, x_2, ...` of one reward per step (each inside a
//! [`RewardBoundary`], so one element moves by at most `Delta = hi - lo`) is summed over the
//! dyadic intervals ("p-sums") of its positions. At step `t` (1-based) let `i` be the lowest set
//! bit of `t`: the p-sum `alpha_i = sum_{j < i} alpha_j + x_t` (the interval `(t - 2^i, t]`) is
//! complete, is released **once** with fresh noise, `alpha^_i = alpha_i + noise`, and cached;
//! the lower p-sums are emptied. The prefix sum `sum_{s <= t} x_s` is released as
//! `sum_{j : bit j of t set} alpha^_j` (post-processing: no new noise), a sum of at most
//! `popcount(t) <= L` noisy p-sums.
//!
//! # Calibration and its composition over the levels
//! A tree over `T` positions has `L = ceil(log2 T) + 1` levels ([`levels_for`]); every element
//! lies in at most one released p-sum per level, so it enters at most `L` releases (Chan et al.
//! Thm 3.5 for pure DP: each `x_t` appears in at most `log T + 1` p-sums; exactly
//! [`binary_releases`], `L` for the first element of a tree). Each p-sum has sensitivity
//! `Delta` (one element changed). The budget of one element is split evenly over its `L`
//! releases ([`TreeBudget::per_node`], rounded down so that `L` parts never exceed the whole):
//!
//! * **zCDP** (Gaussian): each p-sum gets `N(0, sigma^2)` with `sigma^2 = Delta^2 L / (2 rho)`,
//!   i.e. `rho / L`-zCDP per release (Bun & Steinke 2016, Prop. 1.6: `Delta^2 / (2 sigma^2)`),
//!   and `L` releases compose to `L (rho / L) = rho` (Bun & Steinke 2016, Lemma 2.3, adaptive
//!   composition of zCDP).
//! * **pure DP** (Laplace): each p-sum gets `Lap(b)` with `b = Delta L / epsilon` (Chan et al.
//!   Alg. 2 with `epsilon' = epsilon / L`; Dwork & Roth Thm 3.6), `epsilon / L`-DP per release,
//!   and `L` of them compose to `epsilon` (basic composition, Dwork & Roth Thm 3.14). As zCDP
//!   this is `epsilon^2 / 2` (Bun & Steinke Prop. 1.4), the conversion the zCDP paper's Table II
//!   uses (`epsilon -> sqrt(2 rho)`).
//!
//! Releases of different elements overlap (a p-sum holds many elements), but the loss of one
//! element is what the neighbouring relation measures: it is the composition of the releases
//! that contain it, at most `L`, each at `budget / L`.
//!
//! # Streams longer than the tree
//! [`BinaryCounter`] with `restart = true` (the bandit kinds') starts a fresh tree of the same
//! size once its `2^(L-1)` positions are full: the full tree's root (the sum of all its elements)
//! is then a cached release and becomes the base of the following prefix sums. Elements of
//! different trees never share a release, so every element still enters at most `L` releases.
//!
//! # The hybrid mechanism (unknown horizon)
//! Chan, Shi & Song, **Sec. 4, Algorithm 3** (hybrid mechanism): half of the budget runs the
//! logarithmic mechanism (one release of each block `[2^k, 2^(k+1) - 1]` of positions, when the
//! block is complete; each element is in one block), half runs one binary mechanism per block,
//! the block `k` having `2^k` positions and so `k + 1` levels. An element of block `k` enters
//! at most `k + 1` p-sums at `(budget/2)/(k+1)` each and one block release at `budget/2`: its
//! loss is at most the whole budget, and the whole budget for the first element of a block
//! ([`hybrid_releases`]). The prefix at position `t` in block `k` is the sum of
//! the released blocks before it plus block `k`'s binary estimate.
//!
//! # Noise paths
//! Every release goes through the policy's [`NoiseSource`]: simulation-grade `f64` noise from
//! the seeded noise stream, or deployment-grade exact discrete Gaussian / discrete Laplace noise
//! on the integer p-sum from an OS-seeded CSPRNG (CKS20 Thm 4; the geometric mechanism), at the
//! same per-release budget (see `privacy/noise.rs`: the calibration is exact, the budget is not
//! rounded). On the deployment path every element is first rounded to the reward grid
//! ([`NoiseSource::discretise`]), so every p-sum of up to `2^33` elements is an exact integer
//! number of grid units.
//!
//! # Error bounds (what the index policies add)
//! The released prefix is the true prefix plus a sum of independent zero-mean noises with known
//! scales (public: they depend on the budget, the levels and the counts only).
//! [`noise_bound`] bounds it with probability `>= 1 - gamma`: Gaussian, `sqrt(2 V ln(2/gamma))`
//! for the total variance `V`; Laplace, Chan et al. Cor. 2.9 (a sum of independent `Lap(b_i)`:
//! for `nu >= sqrt(sum b_i^2)` and `lambda < 2 sqrt(2) nu^2 / max b_i`, `P[|Y| > lambda] <=
//! 2 exp(-lambda^2 / (8 nu^2))`), with `nu = max(sqrt(sum b_i^2), max b_i sqrt(ln(2/gamma)))`.

use super::{NoiseSource, RewardBoundary, RewardSum};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The budget of one element of a tree-based release, in one currency.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TreeBudget {
    /// `rho`-zCDP: Gaussian noise.
    Zcdp {
        /// rho (inf: no noise).
        rho: f64,
    },
    /// `epsilon`-DP: Laplace noise.
    PureDp {
        /// epsilon (inf: no noise).
        epsilon: f64,
    },
}

impl TreeBudget {
    /// The budget of one of `parts` releases an element enters: `rho / parts` or
    /// `epsilon / parts`, moved down (one ulp at a time) until `parts` of them sum to at most
    /// the whole in floating point.
    pub fn per_node(&self, parts: u32) -> TreeBudget {
        let split = |x: f64| {
            if x.is_infinite() || parts <= 1 {
                return x;
            }
            let p = f64::from(parts);
            let mut y = x / p;
            while y * p > x {
                y = y.next_down();
            }
            y
        };
        match *self {
            TreeBudget::Zcdp { rho } => TreeBudget::Zcdp { rho: split(rho) },
            TreeBudget::PureDp { epsilon } => TreeBudget::PureDp {
                epsilon: split(epsilon),
            },
        }
    }

    /// Half of the budget (the hybrid mechanism's two halves), rounded down.
    pub fn half(&self) -> TreeBudget {
        self.per_node(2)
    }

    /// The value in its currency.
    pub fn value(&self) -> f64 {
        match *self {
            TreeBudget::Zcdp { rho } => rho,
            TreeBudget::PureDp { epsilon } => epsilon,
        }
    }

    /// The noise scale of one release of sensitivity `delta` at this (per-release) budget, at
    /// the sum level: Gaussian `sigma = delta / sqrt(2 rho)` (Bun & Steinke Prop. 1.6), Laplace
    /// `b = delta / epsilon` (Dwork & Roth Thm 3.6). `(scale, variance)`; `0` for an infinite
    /// budget.
    pub fn scale(&self, delta: f64) -> (f64, f64) {
        match *self {
            TreeBudget::Zcdp { rho } if rho.is_infinite() => (0.0, 0.0),
            TreeBudget::PureDp { epsilon } if epsilon.is_infinite() => (0.0, 0.0),
            TreeBudget::Zcdp { rho } => {
                let s = delta / std::f64::consts::SQRT_2 / rho.sqrt();
                (s, s * s)
            }
            TreeBudget::PureDp { epsilon } => {
                let b = delta / epsilon;
                (b, 2.0 * b * b)
            }
        }
    }

    fn check(&self) -> Result<()> {
        let (field, v) = match *self {
            TreeBudget::Zcdp { rho } => ("rho", rho),
            TreeBudget::PureDp { epsilon } => ("epsilon", epsilon),
        };
        if v.is_nan() || v <= 0.0 {
            return Err(Error::param(
                field,
                v,
                "a number > 0 (inf gives the non-private limit)",
            ));
        }
        Ok(())
    }
}

/// `L = ceil(log2 T) + 1`: the levels of a binary tree over `T >= 1` positions, the number of
/// releases each element enters (Chan, Shi & Song, Alg. 2 and Thm 3.5).
pub fn levels_for(horizon: u64) -> u32 {
    let t = horizon.max(1);
    let ceil_log2 = if t.is_power_of_two() {
        t.ilog2()
    } else {
        t.ilog2() + 1
    };
    ceil_log2 + 1
}

/// How many releases the `j`-th element (0-based) of a restarting [`BinaryCounter`] of `levels`
/// levels enters once its tree is full. Alg. 2 releases at step `t` the p-sum
/// `(t - 2^i, t]`, `i` the lowest set bit of `t`, so the element at position `p` (1-based, in
/// its tree) is in the releases of the steps `p, p + lowbit(p), ...` up to the tree's size (the
/// update path of a Fenwick tree): at most `L`, and `L` for the first element of a tree, whose
/// loss is therefore the whole budget.
pub fn binary_releases(levels: u32, j: u64) -> u64 {
    let cap = 1u64 << (levels.clamp(1, 63) - 1);
    let mut t = j % cap + 1;
    let mut n = 0;
    while t <= cap {
        n += 1;
        t += 1 << t.trailing_zeros();
    }
    n
}

/// How many releases the `j`-th element (0-based) of a [`HybridCounter`] enters once its block is
/// complete: its block's binary mechanism (`k + 1` levels, [`binary_releases`]) plus the
/// block's own release, `k = floor(log2(j + 1))` its block (Chan, Shi & Song, Sec. 4). The
/// first element of every block enters `k + 2` releases, whose budgets sum to the whole budget.
pub fn hybrid_releases(j: u64) -> u64 {
    let p = j.saturating_add(1);
    let k = p.ilog2();
    let q = p - (1u64 << k); // 0-based position in the block
    binary_releases(k + 1, q) + 1
}

/// Which family a release's noise is (for [`noise_bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoiseFamily {
    /// Gaussian (continuous or discrete).
    Gaussian,
    /// Laplace (continuous or discrete).
    Laplace,
}

impl TreeBudget {
    /// The noise family of this currency.
    pub fn family(&self) -> NoiseFamily {
        match self {
            TreeBudget::Zcdp { .. } => NoiseFamily::Gaussian,
            TreeBudget::PureDp { .. } => NoiseFamily::Laplace,
        }
    }
}

/// A bound on `|Y|` for `Y` a sum of independent zero-mean noises of one family, holding with
/// probability `>= 1 - gamma` (module docs): Gaussian with total variance `var` (`scales` its
/// standard deviations), `sqrt(2 var ln(2/gamma))`; Laplace with scales `b_i` (Chan, Shi & Song
/// Cor. 2.9), `sqrt(8 ln(2/gamma)) nu`, `nu = max(sqrt(sum b_i^2), max b_i sqrt(ln(2/gamma)))`.
pub fn noise_bound(family: NoiseFamily, scales: &[f64], gamma: f64) -> f64 {
    let gamma = gamma.clamp(f64::MIN_POSITIVE, 1.0);
    let l = (2.0 / gamma).ln();
    let ss: f64 = scales.iter().map(|s| s * s).sum();
    match family {
        NoiseFamily::Gaussian => (2.0 * ss * l).sqrt(),
        NoiseFamily::Laplace => {
            let bmax = scales.iter().copied().fold(0.0, f64::max);
            let nu = ss.sqrt().max(bmax * l.sqrt());
            (8.0 * l).sqrt() * nu
        }
    }
}

/// One cached release: the noisy p-sum and its noise scale (sum level).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Node {
    value: f64,
    scale: f64,
}

/// Release one p-sum (an admitted [`RewardSum`] of `n >= 1` elements) at the per-release budget
/// `budget` through `noise`: the sum plus Gaussian noise of `sigma = Delta / sqrt(2 rho)` or
/// Laplace noise of `b = Delta / epsilon`, `Delta = hi - lo` (module docs). Returns the released
/// sum and its noise scale.
fn release(
    budget: TreeBudget,
    sum: &RewardSum,
    noise: &mut NoiseSource,
    boundary: &RewardBoundary,
) -> Result<Node> {
    let n = sum.releasable(boundary)?;
    let nf = n as f64;
    match budget {
        TreeBudget::Zcdp { rho } => {
            // The mean of n elements has sensitivity Delta / n; sum = n * mean (n is a power of
            // two for every p-sum, so the rescaling is exact).
            let m = noise.gaussian_mean(boundary.width() / nf, rho, sum, boundary)?;
            Ok(Node {
                value: m.value() * nf,
                scale: m.sigma() * nf,
            })
        }
        TreeBudget::PureDp { epsilon } => {
            let (value, scale) = noise.laplace_sum(boundary.width(), epsilon, sum, boundary)?;
            Ok(Node { value, scale })
        }
    }
}

/// The binary mechanism over `2^(L-1)` positions (module docs), holding its raw p-sums
/// (unreleased private statistics, like every policy's episode sums) and its cached releases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BinaryCounter {
    /// `L`: levels, the releases each element enters.
    levels: u32,
    /// The budget of one element (all its `L` releases).
    budget: TreeBudget,
    /// Start a fresh tree when this one is full (else refuse more elements).
    restart: bool,
    /// Elements in the current tree.
    count: u64,
    /// Elements in earlier (full) trees.
    before: u64,
    /// Raw p-sums `alpha_i` of the open intervals (private; `None` when empty).
    raw: Vec<Option<RewardSum>>,
    /// Cached releases `alpha^_i` of the current tree's binary decomposition of `count`.
    released: Vec<Option<Node>>,
    /// Released roots of the full trees before this one (their sum and noise scales).
    base: f64,
    base_scales: Vec<f64>,
    /// Releases made so far.
    releases: u64,
}

impl BinaryCounter {
    /// A binary mechanism of `levels >= 1` levels (`2^(levels-1)` positions per tree; see
    /// [`levels_for`]) at `budget` per element.
    ///
    /// # Errors
    /// `levels` outside `1..=63`; a budget that is not `> 0`.
    pub fn new(levels: u32, budget: TreeBudget, restart: bool) -> Result<Self> {
        if !(1..=63).contains(&levels) {
            return Err(Error::param("levels", levels, "an integer in 1..=63"));
        }
        budget.check()?;
        Ok(BinaryCounter {
            levels,
            budget,
            restart,
            count: 0,
            before: 0,
            raw: vec![None; levels as usize],
            released: vec![None; levels as usize],
            base: 0.0,
            base_scales: vec![],
            releases: 0,
        })
    }

    /// The levels `L`.
    pub fn levels(&self) -> u32 {
        self.levels
    }

    /// Positions per tree, `2^(L-1)`.
    pub fn capacity(&self) -> u64 {
        1u64 << (self.levels - 1)
    }

    /// Elements pushed so far.
    pub fn count(&self) -> u64 {
        self.before + self.count
    }

    /// Releases made so far (one per element).
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// The per-release budget (`budget / L`).
    pub fn node_budget(&self) -> TreeBudget {
        self.budget.per_node(self.levels)
    }

    /// Add the next element `x` (one reward already admitted by `boundary`; on the deployment
    /// path already rounded to the grid by [`NoiseSource::discretise`]) and release the p-sum it
    /// completes (Chan, Shi & Song, Alg. 2, lines 4-7). Exactly one release per element.
    ///
    /// # Errors
    /// `x` not a single element inside `boundary`; a full tree without `restart`; the
    /// mechanism's errors. The counter is unchanged on error.
    pub fn push(
        &mut self,
        x: &RewardSum,
        noise: &mut NoiseSource,
        boundary: &RewardBoundary,
    ) -> Result<f64> {
        if x.n() != 1 || !x.is_within(boundary) {
            return Err(Error::Protocol(format!(
                "a tree counter takes one element inside the boundary at a time ({} given)",
                x.n()
            )));
        }
        if self.count == self.capacity() && !self.restart {
            return Err(Error::param(
                "horizon",
                self.count + 1,
                format!("at most {} elements in this tree", self.capacity()),
            ));
        }
        let t = self.count + 1;
        let i = t.trailing_zeros() as usize;
        let mut alpha = *x;
        for j in 0..i {
            if let Some(s) = &self.raw[j] {
                alpha.add(s)?;
            }
        }
        let node = release(self.node_budget(), &alpha, noise, boundary)?;
        for j in 0..i {
            self.raw[j] = None;
            self.released[j] = None;
        }
        self.raw[i] = Some(alpha);
        self.released[i] = Some(node);
        self.count = t;
        self.releases += 1;
        if self.count == self.capacity() && self.restart {
            // The full tree's root is its total: the base of every later prefix.
            self.base += node.value;
            self.base_scales.push(node.scale);
            self.before += self.count;
            self.count = 0;
            self.raw.iter_mut().for_each(|r| *r = None);
            self.released.iter_mut().for_each(|r| *r = None);
        }
        Ok(node.value)
    }

    /// The released prefix sum of every element so far (post-processing of cached releases).
    pub fn estimate(&self) -> f64 {
        self.base + self.released.iter().flatten().map(|n| n.value).sum::<f64>()
    }

    /// The noise scales of the releases [`Self::estimate`] sums (public).
    pub fn scales(&self) -> Vec<f64> {
        let mut s = self.base_scales.clone();
        s.extend(self.released.iter().flatten().map(|n| n.scale));
        s
    }

    /// The noise scales the estimate of a tree's worst position sums (all `L` levels, a priori:
    /// Mishra & Thakurta's bound), plus the full trees before.
    pub fn worst_scales(&self) -> Vec<f64> {
        let (one, _) = self.node_budget().scale(1.0);
        let mut s = self.base_scales.clone();
        s.extend(std::iter::repeat_n(one, self.levels as usize));
        s
    }

    /// The noise family.
    pub fn family(&self) -> NoiseFamily {
        self.budget.family()
    }
}

/// The hybrid mechanism (module docs; Chan, Shi & Song Sec. 4): no horizon needed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridCounter {
    /// The budget of one element.
    budget: TreeBudget,
    /// The current block `k` (positions `2^k ..= 2^(k+1) - 1`, 1-based).
    block: u32,
    /// The current block's binary mechanism (`k + 1` levels, half the budget).
    tree: BinaryCounter,
    /// The current block's raw sum (private).
    block_sum: Option<RewardSum>,
    /// Released block sums (the logarithmic mechanism), their total and scales.
    base: f64,
    base_scales: Vec<f64>,
    /// Elements pushed.
    count: u64,
    /// Releases made.
    releases: u64,
}

impl HybridCounter {
    /// A hybrid counter at `budget` per element.
    ///
    /// # Errors
    /// A budget that is not `> 0`.
    pub fn new(budget: TreeBudget) -> Result<Self> {
        budget.check()?;
        Ok(HybridCounter {
            budget,
            block: 0,
            tree: BinaryCounter::new(1, budget.half(), false)?,
            block_sum: None,
            base: 0.0,
            base_scales: vec![],
            count: 0,
            releases: 0,
        })
    }

    /// Elements pushed.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Releases made so far.
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// Add the next element and make the releases it completes: its block's p-sum, and the
    /// block's sum when the block is full (at most two releases).
    ///
    /// # Errors
    /// As [`BinaryCounter::push`]; the counter is unchanged on error.
    pub fn push(
        &mut self,
        x: &RewardSum,
        noise: &mut NoiseSource,
        boundary: &RewardBoundary,
    ) -> Result<()> {
        let mut block_sum = self.block_sum.unwrap_or(*x);
        if self.block_sum.is_some() {
            block_sum.add(x)?;
        }
        let mut tree = self.tree.clone();
        tree.push(x, noise, boundary)?;
        self.releases += 1;
        self.count += 1;
        if tree.count() == tree.capacity() {
            // The block is complete: the logarithmic mechanism releases its sum (half the
            // budget; each element is in one block).
            let node = release(self.budget.half(), &block_sum, noise, boundary)?;
            self.releases += 1;
            self.base += node.value;
            self.base_scales.push(node.scale);
            self.block += 1;
            self.tree = BinaryCounter::new(self.block + 1, self.budget.half(), false)?;
            self.block_sum = None;
        } else {
            self.tree = tree;
            self.block_sum = Some(block_sum);
        }
        Ok(())
    }

    /// The released prefix sum (post-processing of cached releases).
    pub fn estimate(&self) -> f64 {
        self.base + self.tree.estimate()
    }

    /// The noise scales of the releases [`Self::estimate`] sums.
    pub fn scales(&self) -> Vec<f64> {
        let mut s = self.base_scales.clone();
        s.extend(self.tree.scales());
        s
    }

    /// The noise scales of the worst position of the current block (all its `k + 1` levels, a
    /// priori) plus the released blocks: the hybrid mechanism's a-priori error bound
    /// (Chan, Shi & Song Sec. 4, the hybrid mechanism's error bound, as Tossou & Dimitrakakis's
    /// DP-UCB-Bound uses it).
    pub fn worst_scales(&self) -> Vec<f64> {
        let mut s = self.base_scales.clone();
        s.extend(self.tree.worst_scales());
        s
    }

    /// The noise family.
    pub fn family(&self) -> NoiseFamily {
        self.budget.family()
    }
}

/// The binary mechanism for a vector statistic `sum_s r_s w_s` in `R^r` (`r_s` a reward inside
/// the boundary, `w_s` a public weight vector with `||w_s||_2 <= 1`, e.g. the round's action
/// scaled into the unit ball): each p-sum has L2 sensitivity `Delta = hi - lo` and is released
/// with `N(0, sigma^2 I_r)`, `sigma^2 = Delta^2 L / (2 rho)` (Bun & Steinke Prop. 1.6 at
/// `rho / L`; `L` releases per element compose to `rho`, Lemma 2.3), zCDP only (the crate's vector
/// family is Gaussian). The deployment path keeps each p-sum exactly as a
/// [`super::LinearSum`] (merged with [`super::LinearSum::absorb`]) and releases it with the
/// multivariate discrete Gaussian of [`NoiseSource::gaussian_linear_sum`] at the same
/// per-release `rho` (CKS20 Thm 4). Restarts like [`BinaryCounter`] once its tree is full.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorTree {
    levels: u32,
    rho: f64,
    dim: usize,
    count: u64,
    /// Raw p-sums (simulation path).
    raw: Vec<Option<Vec<f64>>>,
    /// Raw p-sums, exact (deployment path).
    exact: Vec<Option<super::LinearSum>>,
    released: Vec<Option<Vec<f64>>>,
    /// Per-coordinate noise scale of each cached release (sum level).
    scales: Vec<f64>,
    base: Vec<f64>,
    base_terms: u64,
    sigma: f64,
    releases: u64,
}

impl VectorTree {
    /// A vector tree of `levels` levels in `R^dim` at `rho` per element.
    ///
    /// # Errors
    /// `levels` outside `1..=63`, `rho` not `> 0`.
    pub fn new(levels: u32, rho: f64, dim: usize) -> Result<Self> {
        if !(1..=63).contains(&levels) {
            return Err(Error::param("levels", levels, "an integer in 1..=63"));
        }
        TreeBudget::Zcdp { rho }.check()?;
        let n = levels as usize;
        Ok(VectorTree {
            levels,
            rho,
            dim,
            count: 0,
            raw: vec![None; n],
            exact: vec![None; n],
            released: vec![None; n],
            scales: vec![0.0; n],
            base: vec![0.0; dim],
            base_terms: 0,
            sigma: 0.0,
            releases: 0,
        })
    }

    /// Positions per tree, `2^(L-1)`.
    pub fn capacity(&self) -> u64 {
        1u64 << (self.levels - 1)
    }

    /// The per-release `rho / L`.
    pub fn node_rho(&self) -> f64 {
        TreeBudget::Zcdp { rho: self.rho }
            .per_node(self.levels)
            .value()
    }

    /// Releases made so far (one per element).
    pub fn releases(&self) -> u64 {
        self.releases
    }

    /// Add `r w` (`r` one reward admitted by `boundary`, on the deployment grid on that path;
    /// `||w||_2 <= 1`) and release the p-sum it completes (Chan, Shi & Song Alg. 2). Returns the
    /// released p-sum.
    ///
    /// # Errors
    /// `r` not one reward inside `boundary`, `w` of another length or longer than 1; the
    /// mechanism's errors. The tree is unchanged on error.
    pub fn push(
        &mut self,
        r: &RewardSum,
        w: &[f64],
        noise: &mut NoiseSource,
        boundary: &RewardBoundary,
    ) -> Result<Vec<f64>> {
        if r.n() != 1 || !r.is_within(boundary) {
            return Err(Error::Protocol(
                "a vector tree takes one reward inside the boundary at a time".into(),
            ));
        }
        let norm2: f64 = w.iter().map(|x| x * x).sum();
        if w.len() != self.dim || norm2.is_nan() || norm2 > 1.0 + 1e-12 {
            return Err(Error::param(
                "weights",
                format!("{w:?}"),
                format!("{} finite numbers of L2 norm at most 1", self.dim),
            ));
        }
        let t = self.count + 1;
        let i = t.trailing_zeros() as usize;
        let width = boundary.width();
        let rho = self.node_rho();
        let (value, scale, raw, exact) = match noise.linear_sum(self.dim, 1, 1.0, boundary) {
            None => {
                let mut alpha: Vec<f64> = w.iter().map(|x| x * r.sum()).collect();
                for j in 0..i {
                    if let Some(v) = &self.raw[j] {
                        alpha.iter_mut().zip(v).for_each(|(a, b)| *a += b);
                    }
                }
                let mech = super::GaussianMechanism::for_zcdp(width, rho)?;
                let rng = noise
                    .simulation_rng()
                    .expect("the simulation path has its generator");
                let value: Vec<f64> = alpha.iter().map(|&v| mech.release(v, rng)).collect();
                (value, mech.sigma(), Some(alpha), None)
            }
            Some(mut acc) => {
                acc.push(r, w, boundary)?;
                for j in 0..i {
                    if let Some(e) = &self.exact[j] {
                        acc.absorb(e)?;
                    }
                }
                let (q, sigma) = noise.gaussian_linear_sum(rho, width, &acc, boundary)?;
                for &qj in &q {
                    super::tap::record(super::tap::Family::Gaussian, qj);
                }
                (q, sigma, None, Some(acc))
            }
        };
        for j in 0..i {
            self.raw[j] = None;
            self.exact[j] = None;
            self.released[j] = None;
        }
        self.raw[i] = raw;
        self.exact[i] = exact;
        self.released[i] = Some(value.clone());
        self.scales[i] = scale;
        self.sigma = self.sigma.max(scale);
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
        Ok(value)
    }

    /// The released statistic `sum_s r_s w_s` so far (post-processing of cached releases).
    pub fn estimate(&self) -> Vec<f64> {
        let mut v = self.base.clone();
        for r in self.released.iter().flatten() {
            v.iter_mut().zip(r).for_each(|(a, b)| *a += b);
        }
        v
    }

    /// The number of releases [`Self::estimate`] sums, and the largest per-coordinate noise
    /// scale of a release so far: the estimate's noise per coordinate has variance at most
    /// `terms sigma^2`.
    pub fn noise_terms(&self) -> (u64, f64) {
        let terms = self.base_terms + self.released.iter().flatten().count() as u64;
        let sigma = if self.sigma > 0.0 {
            self.sigma
        } else {
            TreeBudget::Zcdp {
                rho: self.node_rho(),
            }
            .scale(1.0)
            .0
        };
        (terms, sigma)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::privacy::{BoundaryMode, NoiseKind};

    fn unit() -> RewardBoundary {
        RewardBoundary::unit(BoundaryMode::Clip)
    }

    #[test]
    fn levels_and_splits() {
        assert_eq!(
            [1, 2, 3, 4, 5, 8, 9, 1024, 1025].map(levels_for),
            [1, 2, 3, 3, 4, 4, 5, 11, 12]
        );
        // blocks [1], [2, 3], [4..7], [8..15]: the first of a block enters k + 2 releases
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6, 7].map(hybrid_releases),
            [2, 3, 2, 4, 3, 3, 2, 5]
        );
        assert_eq!(
            [0, 1, 2, 3, 7].map(|j| binary_releases(4, j)),
            [4, 3, 3, 2, 1]
        );
        for parts in 1..100u32 {
            for x in [0.1, 1.0, 3.3, 1e-9, 1e9] {
                let y = TreeBudget::Zcdp { rho: x }.per_node(parts).value();
                assert!(y * f64::from(parts) <= x && y > 0.0);
                assert!((y * f64::from(parts) - x).abs() <= 1e-12 * x);
            }
        }
        assert_eq!(
            TreeBudget::PureDp {
                epsilon: f64::INFINITY
            }
            .per_node(7)
            .value(),
            f64::INFINITY
        );
        assert!(BinaryCounter::new(0, TreeBudget::Zcdp { rho: 1.0 }, true).is_err());
        assert!(BinaryCounter::new(3, TreeBudget::Zcdp { rho: 0.0 }, true).is_err());
        assert!(HybridCounter::new(TreeBudget::PureDp { epsilon: -1.0 }).is_err());
    }

    /// Without noise (infinite budget) the estimate is the exact prefix sum at every step, and
    /// a tree of `L` levels releases once per element; every element of a full tree lies in
    /// exactly [`binary_releases`] released p-sums, at most `L` and `L` for the first element
    /// (Alg. 2's p-sum of step `t` is `(t - 2^i, t]`, `i` = the lowest set bit of `t`),
    /// restarts included.
    #[test]
    fn exact_prefix_sums_and_l_releases_per_element() {
        let b = unit();
        let mut noise = NoiseSource::simulation(1);
        for levels in 1..=6u32 {
            let mut c =
                BinaryCounter::new(levels, TreeBudget::Zcdp { rho: f64::INFINITY }, true).unwrap();
            let cap = c.capacity();
            let mut exact = 0.0;
            let mut members = vec![0u32; (3 * cap) as usize];
            for t in 1..=3 * cap {
                let x = ((t * 7) % 5) as f64 / 4.0;
                exact += x;
                c.push(&b.single(x).unwrap(), &mut noise, &b).unwrap();
                assert_eq!(c.estimate(), exact, "levels {levels} t {t}");
                assert_eq!(c.releases(), t);
                let local = (t - 1) % cap + 1;
                let i = local.trailing_zeros();
                for s in (t + 1 - (1u64 << i))..=t {
                    members[(s - 1) as usize] += 1;
                }
            }
            for (j, &m) in members.iter().enumerate() {
                assert_eq!(
                    u64::from(m),
                    binary_releases(levels, j as u64),
                    "{members:?}"
                );
                assert!(m <= levels);
            }
            assert_eq!(members[0], levels);
            // at most L terms in an estimate (the base of full trees aside)
            assert!(c.scales().len() <= levels as usize + 3);
        }
        let mut h = HybridCounter::new(TreeBudget::PureDp {
            epsilon: f64::INFINITY,
        })
        .unwrap();
        let mut exact = 0.0;
        for t in 1..=200u64 {
            let x = ((t * 3) % 4) as f64 / 3.0;
            exact += x;
            h.push(&b.single(x).unwrap(), &mut noise, &b).unwrap();
            assert!((h.estimate() - exact).abs() < 1e-12, "t {t}");
        }
        // 200 elements: one p-sum each, one block release for each of the 7 full blocks
        // (1 + 2 + ... + 64 = 127 positions).
        assert_eq!(h.releases(), 200 + 7);
        let mut fixed = BinaryCounter::new(2, TreeBudget::Zcdp { rho: 1.0 }, false).unwrap();
        for _ in 0..2 {
            fixed.push(&b.single(0.5).unwrap(), &mut noise, &b).unwrap();
        }
        let before = fixed.clone();
        assert!(fixed.push(&b.single(0.5).unwrap(), &mut noise, &b).is_err());
        assert_eq!(fixed, before, "refused push changes nothing");
        assert!(
            fixed
                .push(&b.drawn_sum(1.0, 2), &mut noise, &b)
                .unwrap_err()
                .to_string()
                .contains("one element")
        );
    }

    /// The hybrid mechanism's accounting: an element of block `k` enters at most `k + 1`
    /// p-sums at `(budget/2)/(k+1)` and one block release at `budget/2`, so its releases compose
    /// to at most the budget, and to it (up to rounding) for the first element of a block. The
    /// counts of [`hybrid_releases`] are those of a counter that records which elements each
    /// release holds.
    #[test]
    fn hybrid_composes_to_the_budget() {
        for eps in [0.1, 1.0, 2.5] {
            let budget = TreeBudget::PureDp { epsilon: eps };
            for j in 0..1000u64 {
                let k = (j + 1).ilog2();
                let nodes = hybrid_releases(j) - 1;
                assert!(nodes <= u64::from(k + 1));
                let node = budget.half().per_node(k + 1).value();
                let total = node * nodes as f64 + budget.half().value();
                assert!(total <= eps, "{j}: {total}");
                if (j + 1).is_power_of_two() {
                    assert!((total - eps).abs() < 1e-12, "{j}: {total}");
                }
            }
        }
        // Membership, counted: block k's p-sum at its local step q covers (q - 2^i, q], the
        // block release covers the block.
        let mut members = vec![0u64; 127];
        for k in 0..7u32 {
            let start = (1u64 << k) - 1; // 0-based first element of block k
            for q in 1..=(1u64 << k) {
                let i = q.trailing_zeros();
                for s in (q - (1 << i))..q {
                    members[(start + s) as usize] += 1;
                }
            }
            for s in 0..(1u64 << k) {
                members[(start + s) as usize] += 1;
            }
        }
        for (j, &m) in members.iter().enumerate() {
            assert_eq!(m, hybrid_releases(j as u64), "element {j}");
        }
    }

    /// Calibration (Chan et al. Alg. 2 with `epsilon / L`; Bun & Steinke Prop. 1.6 with
    /// `rho / L`): node scales are `b = L / epsilon` and `sigma^2 = L / (2 rho)` for rewards in
    /// [0, 1], and the loss of one release at sensitivity 1 is `budget / L`.
    #[test]
    fn node_noise_is_calibrated() {
        let b = unit();
        let mut noise = NoiseSource::simulation(2);
        let mut c = BinaryCounter::new(4, TreeBudget::PureDp { epsilon: 0.5 }, true).unwrap();
        c.push(&b.single(1.0).unwrap(), &mut noise, &b).unwrap();
        assert!((c.scales()[0] - 8.0).abs() < 1e-12);
        let mut g = BinaryCounter::new(5, TreeBudget::Zcdp { rho: 0.25 }, true).unwrap();
        for _ in 0..3 {
            g.push(&b.single(1.0).unwrap(), &mut noise, &b).unwrap();
        }
        for s in g.scales() {
            assert!((s * s - 5.0 / 0.5).abs() < 1e-9, "{s}");
            let m = crate::privacy::GaussianMechanism::with_sigma(s).unwrap();
            assert!(m.zcdp_map(1.0) <= 0.25 / 5.0 * (1.0 + 1e-12));
        }
        assert_eq!(g.scales().len(), 2); // 3 = 0b11: two p-sums
        assert_eq!(g.worst_scales().len(), 5);
    }

    /// The prefix estimate's error is the sum of the cached p-sums' noises: after `t` elements
    /// its variance is `popcount(t) sigma^2` (Gaussian) or `popcount(t) 2 b^2` (Laplace).
    /// 4000 seeded repetitions per case; the sample variance must lie within 6 standard
    /// errors of the stated one (`se = var sqrt(2 / n)` Gaussian, `var sqrt(5 / n)` Laplace,
    /// kurtosis 6): false-failure rate below 1e-8 per case (fixed seeds: deterministic).
    /// The same check fails for a variance 25% off (power).
    #[test]
    fn prefix_error_has_the_stated_variance() {
        let b = unit();
        for (budget, t, kurt) in [
            (TreeBudget::Zcdp { rho: 0.5 }, 7u64, 2.0),
            (TreeBudget::PureDp { epsilon: 1.0 }, 11, 5.0),
            (TreeBudget::Zcdp { rho: 2.0 }, 16, 2.0),
        ] {
            let n = 4000;
            let mut errs = vec![];
            let mut stated = 0.0;
            for r in 0..n {
                let mut noise = NoiseSource::simulation(1000 + r);
                let mut c = BinaryCounter::new(5, budget, true).unwrap();
                let mut exact = 0.0;
                for s in 0..t {
                    let x = (s % 3) as f64 / 2.0;
                    exact += x;
                    c.push(&b.single(x).unwrap(), &mut noise, &b).unwrap();
                }
                errs.push(c.estimate() - exact);
                stated = c
                    .scales()
                    .iter()
                    .map(|s| match budget {
                        TreeBudget::Zcdp { .. } => s * s,
                        TreeBudget::PureDp { .. } => 2.0 * s * s,
                    })
                    .sum::<f64>();
            }
            assert_eq!(
                c_terms(t),
                t.count_ones(),
                "the estimate sums popcount(t) p-sums"
            );
            let nf = n as f64;
            let mean = errs.iter().sum::<f64>() / nf;
            let var = errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (nf - 1.0);
            let se = stated * (kurt / nf).sqrt();
            assert!(
                (var - stated).abs() < 6.0 * se,
                "{budget:?}: {var} vs {stated}"
            );
            assert!((var - 1.25 * stated).abs() > 6.0 * se, "power");
            assert!(mean.abs() < 6.0 * (stated / nf).sqrt());
        }
    }

    fn c_terms(t: u64) -> u32 {
        t.count_ones()
    }

    /// Deployment path: every p-sum is a grid fraction whose integer noise follows the
    /// calibrated discrete Laplace `Lap_Z(t)`, `t = 2^k L / epsilon` (here `k = 3`, `L = 2`,
    /// `epsilon = 1`: `t = 16`), and the discrete Gaussian `N_Z(0, (2^k)^2 L / (2 rho))` (`rho =
    /// 2`, `L = 2`: `sigma^2 = 32`); chi-square + KS at alpha = 1e-6 on the OS generator (not
    /// seedable: false-failure rate <= 2e-6 per family and run).
    #[test]
    fn deployment_nodes_follow_the_calibrated_law() {
        use crate::privacy::discrete::tests::check_pmf;
        let b = unit();
        for (budget, pmf, tail) in [
            (
                TreeBudget::PureDp { epsilon: 1.0 },
                Box::new(|y: i128| (-(y.abs() as f64) / 16.0).exp()) as Box<dyn Fn(i128) -> f64>,
                700,
            ),
            (
                TreeBudget::Zcdp { rho: 2.0 },
                Box::new(|y: i128| (-((y * y) as f64) / 64.0).exp()),
                100,
            ),
        ] {
            let mut noise = NoiseSource::new(NoiseKind::Deployment, 3, 0).unwrap();
            let mut draws: Vec<i128> = vec![];
            for _ in 0..20_000 {
                let mut c = BinaryCounter::new(2, budget, false).unwrap();
                // 0.3 rounds to 0.25 (2 units) on the 2^-3 grid.
                let x = noise.discretise(0.3, 1, &b);
                assert_eq!(x, 0.25);
                let v1 = c.push(&b.single(x).unwrap(), &mut noise, &b).unwrap();
                let v2 = c.push(&b.single(x).unwrap(), &mut noise, &b).unwrap();
                for (v, units) in [(v1, 2.0), (v2, 4.0)] {
                    let y = v * 8.0 - units;
                    assert_eq!(y, y.round(), "a grid fraction");
                    draws.push(y as i128);
                }
            }
            check_pmf(&draws, pmf, tail, "deployment tree node");
        }
    }

    /// The vector tree: without noise its estimate is the exact `sum r w`; with noise each
    /// release's per-coordinate scale is `sigma^2 = 4 L / (2 rho)` for rewards in [-1, 1], on
    /// both paths, and the deployment p-sums are released through the exact accumulator
    /// (merged lower levels included: the estimate stays within a few sigma of the truth).
    /// Deployment draws are OS-keyed: the 8-sigma check fails with probability < 1e-14.
    #[test]
    fn vector_tree_sums_and_calibration() {
        let b = RewardBoundary::new(-1.0, 1.0, BoundaryMode::Clip).unwrap();
        let mut noise = NoiseSource::simulation(3);
        let mut exact_tree = VectorTree::new(3, f64::INFINITY, 2).unwrap();
        let mut truth = [0.0, 0.0];
        for t in 0..11u64 {
            let r = ((t % 5) as f64 - 2.0) / 2.0;
            let w = [0.6, -0.8 * (t % 2) as f64];
            truth[0] += r * w[0];
            truth[1] += r * w[1];
            exact_tree
                .push(&b.single(r).unwrap(), &w, &mut noise, &b)
                .unwrap();
            let e = exact_tree.estimate();
            assert!((e[0] - truth[0]).abs() < 1e-12 && (e[1] - truth[1]).abs() < 1e-12);
        }
        assert_eq!(exact_tree.releases(), 11);
        assert!(
            exact_tree
                .push(&b.single(0.5).unwrap(), &[1.0, 1.0], &mut noise, &b)
                .is_err()
        );
        for kind in [NoiseKind::Simulation, NoiseKind::Deployment] {
            let mut noise = NoiseSource::new(kind, 20, 9).unwrap();
            let mut tree = VectorTree::new(4, 0.5, 2).unwrap();
            let mut truth = [0.0, 0.0];
            for t in 0..7u64 {
                let r = noise.discretise(((t % 3) as f64 - 1.0) * 0.7, 1, &b);
                let w = [0.6, 0.8];
                truth[0] += r * 0.6;
                truth[1] += r * 0.8;
                tree.push(&b.single(r).unwrap(), &w, &mut noise, &b)
                    .unwrap();
            }
            let (terms, sigma) = tree.noise_terms();
            assert_eq!(terms, 3); // 7 = 0b111
            let want = (4.0f64 * 4.0 / (2.0 * 0.5)).sqrt();
            assert!(
                (sigma / want - 1.0).abs() < 1e-6,
                "{kind:?}: {sigma} vs {want}"
            );
            let e = tree.estimate();
            for j in 0..2 {
                assert!(
                    (e[j] - truth[j]).abs() < 8.0 * sigma * 3f64.sqrt(),
                    "{kind:?}"
                );
            }
        }
    }
}
