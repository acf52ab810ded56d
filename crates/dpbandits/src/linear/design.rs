//! G-optimal (equivalently D-optimal) experimental design on a finite arm set.
//!
//! # Problem
//! For arms `x_1..x_K` spanning `R^r`, a design is a probability vector `pi` on the arms,
//! `V(pi) = sum_i pi_i x_i x_i^T` and `g(pi) = max_i ||x_i||^2_{V(pi)^{-1}}` (the *squared* norm,
//! spec zcdp §3.4 [A]). Kiefer–Wolfowitz: `pi` maximises `ln det V(pi)` iff it minimises `g`, and
//! then `g(pi) = r` (Azize & Basu 2024, Eq. 5; Lattimore & Szepesvári 2020, Thm 21.1).
//!
//! # Solver
//! Frank–Wolfe / Fedorov–Wynn with **away steps** (Todd & Yildirim 2007, "On Khachiyan's algorithm
//! for the computation of minimum-volume enclosing ellipsoids", the WA-TY variant; the MVEE problem
//! is the dual of D-optimal design):
//! * start from the uniform design on `r` spanning points chosen by pivoted Gram–Schmidt (plain
//!   Frank–Wolfe, [`DesignSolver::FrankWolfe`], starts from the uniform design on all arms);
//! * at each iteration compute `omega_i = x_i^T V(pi)^{-1} x_i`; the *toward* candidate is
//!   `j+ = argmax omega`, the *away* candidate `j- = argmin_{pi_j > 0} omega`;
//! * if `omega_{j+}/r - 1 >= 1 - omega_{j-}/r`, move towards `j+`, else away from `j-`:
//!   `pi <- (1 - tau) pi + tau e_j` with the exact line search of `ln det`,
//!   `tau = (omega_j/r - 1)/(omega_j - 1)` (spec §3.4), clamped at `-pi_j/(1 - pi_j)` for away
//!   steps (a *drop* step sets `pi_j` to exactly 0);
//! * stop when `g(pi) <= (1 + eps) r` (default `eps = 1e-3`) or at the iteration cap.
//!
//! Plain Fedorov–Wynn (toward steps only) needs `O(r/eps)` iterations and keeps every arm it ever
//! touched in the support; away steps converge linearly and drop arms, so the support stays small.
//! `V(pi)^{-1}` and `omega` are updated by Sherman–Morrison between exact refreshes (Cholesky, every
//! [`REFRESH`] iterations and always before the stopping test is accepted), so the reported
//! `g(pi)` is computed from a fresh factorisation.
//!
//! # Support
//! If the support is still larger than `r(r+1)/2` at convergence it is reduced by Carathéodory
//! steps on the vectors `vech(x x^T)` (dimension `r(r+1)/2`): a null combination `c` of
//! `r(r+1)/2 + 1` support points is removed until one weight hits zero, which keeps `V(pi)` up to
//! the renormalisation of the weights. The reduced design is re-checked against the stopping test
//! and polished by more away-step iterations if needed.
//!
//! # Arm sets that do not span `R^d`
//! [`Span::of`] finds an orthonormal basis `U` (`d x r`) of the span of the arms from the
//! eigendecomposition of `sum_a a a^T` (eigenvalues below `1e-10` times the largest count as zero);
//! the design, the least squares and the noise then work on the coordinates `U^T a` in dimension
//! `r` (spec §3.8 proposal). `r = 0` (all arms zero) is reported as a design with `g = 0`.

use crate::error::{Error, Result};
use nalgebra::{DMatrix, DVector};

/// Exact refresh period of `V^{-1}` in the solver.
pub const REFRESH: usize = 32;

/// Solver options.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DesignOptions {
    /// Stop when `g(pi) <= (1 + tolerance) r`.
    pub tolerance: f64,
    /// Iteration cap (the result reports `converged = false` if it is hit).
    pub max_iterations: usize,
    /// Which Frank–Wolfe variant.
    pub solver: DesignSolver,
}

/// Frank–Wolfe variant of the design solver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DesignSolver {
    /// Away steps and drop steps (Todd & Yildirim 2007) plus Carathéodory support reduction:
    /// support `<= r(r+1)/2` as Algorithm 2 requires (default).
    #[default]
    AwaySteps,
    /// Plain Frank–Wolfe / Fedorov–Wynn (toward steps only, from the uniform design, no support
    /// reduction): every arm keeps a positive weight, as the spec expects of the paper's
    /// implementation (§3.4). For reproducing Figure 5; violates `|S_l| <= d(d+1)/2`.
    FrankWolfe,
}

impl Default for DesignOptions {
    fn default() -> Self {
        DesignOptions {
            tolerance: 1e-3,
            max_iterations: 200_000,
            solver: DesignSolver::AwaySteps,
        }
    }
}

impl DesignOptions {
    /// Check the options.
    pub fn validate(&self) -> Result<()> {
        if !(self.tolerance.is_finite() && self.tolerance > 0.0) {
            return Err(Error::param(
                "design_tolerance",
                self.tolerance,
                "a finite number > 0 (e.g. 1e-3)",
            ));
        }
        if self.max_iterations == 0 {
            return Err(Error::param("design_max_iterations", 0, "an integer >= 1"));
        }
        Ok(())
    }
}

/// An orthonormal basis of the span of a set of vectors, and the coordinates of each vector in it.
#[derive(Debug, Clone)]
pub struct Span {
    /// `d x r` matrix with orthonormal columns.
    pub basis: DMatrix<f64>,
    /// `U^T a` for each input vector (length `r`).
    pub coords: Vec<DVector<f64>>,
}

impl Span {
    /// The span of `arms` (all of the same dimension `d >= 1`).
    pub fn of(arms: &[DVector<f64>]) -> Span {
        let d = arms.first().map_or(0, |a| a.len());
        let mut gram = DMatrix::<f64>::zeros(d, d);
        for a in arms {
            gram.ger(1.0, a, a, 1.0);
        }
        let eig = gram.symmetric_eigen();
        let max = eig.eigenvalues.iter().copied().fold(0.0f64, f64::max);
        let mut keep: Vec<usize> = (0..d)
            .filter(|&i| max > 0.0 && eig.eigenvalues[i] > 1e-10 * max)
            .collect();
        // Largest eigenvalue first, for a deterministic basis order.
        keep.sort_by(|&a, &b| eig.eigenvalues[b].total_cmp(&eig.eigenvalues[a]));
        let r = keep.len();
        let mut basis = DMatrix::<f64>::zeros(d, r);
        for (c, &i) in keep.iter().enumerate() {
            basis.set_column(c, &eig.eigenvectors.column(i));
        }
        let coords = arms.iter().map(|a| basis.tr_mul(a)).collect();
        Span { basis, coords }
    }

    /// Dimension `r` of the span.
    pub fn rank(&self) -> usize {
        self.basis.ncols()
    }
}

/// A design on a finite set of points.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Design {
    /// Weight of each input point (zero outside the support); sums to 1.
    pub weights: Vec<f64>,
    /// Indices of the points with positive weight, ascending.
    pub support: Vec<usize>,
    /// `g(pi) = max_i ||x_i||^2_{V(pi)^{-1}}` (computed from a fresh Cholesky factorisation).
    pub g: f64,
    /// Dimension `r` of the points.
    pub rank: usize,
    /// Solver iterations used.
    pub iterations: usize,
    /// Whether the stopping test `g <= (1 + eps) r` was met.
    pub converged: bool,
}

impl Design {
    /// `ln det V(pi)` on the given points.
    pub fn ln_det(&self, points: &[DVector<f64>]) -> f64 {
        ln_det(&info_matrix(points, &self.weights))
    }
}

/// `V(pi) = sum_i pi_i x_i x_i^T`.
pub fn info_matrix(points: &[DVector<f64>], weights: &[f64]) -> DMatrix<f64> {
    let r = points.first().map_or(0, |p| p.len());
    let mut v = DMatrix::<f64>::zeros(r, r);
    for (x, &w) in points.iter().zip(weights) {
        if w > 0.0 {
            v.ger(w, x, x, 1.0);
        }
    }
    v
}

/// `ln det M` of a symmetric positive definite matrix (`-inf` if it is not positive definite).
pub fn ln_det(m: &DMatrix<f64>) -> f64 {
    m.clone()
        .cholesky()
        .map_or(f64::NEG_INFINITY, |c| c.ln_determinant())
}

/// `max_i x_i^T M^{-1} x_i` and every `x_i^T M^{-1} x_i`, from a Cholesky factorisation of `M`.
/// `None` if `M` is not positive definite.
pub fn leverages(points: &[DVector<f64>], m: &DMatrix<f64>) -> Option<Vec<f64>> {
    let chol = m.clone().cholesky()?;
    Some(
        points
            .iter()
            .map(|x| {
                let y = chol.solve(x);
                x.dot(&y)
            })
            .collect(),
    )
}

/// G-optimal design on `points`, which must span `R^r` (`r` = their common length); use
/// [`Span::of`] first for arm sets that may not span.
///
/// # Errors
/// The points do not span `R^r` (the uniform design's information matrix is singular), or the
/// options are invalid.
pub fn g_optimal(points: &[DVector<f64>], opts: DesignOptions) -> Result<Design> {
    opts.validate()?;
    let k = points.len();
    if k == 0 {
        return Err(Error::param("arms", "[]", "at least one arm"));
    }
    let r = points[0].len();
    if r == 0 {
        let mut weights = vec![0.0; k];
        weights[0] = 1.0;
        return Ok(Design {
            weights,
            support: vec![0],
            g: 0.0,
            rank: 0,
            iterations: 0,
            converged: true,
        });
    }
    let mut u = initial_design(points, r, opts.solver);
    let mut iterations = 0usize;
    let target = (1.0 + opts.tolerance) * r as f64;
    let away = opts.solver == DesignSolver::AwaySteps;
    run_away_fw(
        points,
        &mut u,
        target,
        opts.max_iterations,
        &mut iterations,
        away,
    )?;
    let m = r * (r + 1) / 2;
    // Support reduction, then polish; a few rounds at most.
    for _ in 0..if away { 4 } else { 0 } {
        if support_of(&u).len() <= m {
            break;
        }
        caratheodory(points, &mut u, m);
        run_away_fw(
            points,
            &mut u,
            target,
            opts.max_iterations,
            &mut iterations,
            true,
        )?;
    }
    let v = info_matrix(points, &u);
    let lev = leverages(points, &v).ok_or_else(not_spanning)?;
    let g = lev.iter().copied().fold(0.0, f64::max);
    Ok(Design {
        support: support_of(&u),
        weights: u,
        g,
        rank: r,
        iterations,
        converged: g <= target,
    })
}

/// Starting design. Plain Frank–Wolfe starts from the uniform design (spec §3.4). The away-step
/// solver starts from the uniform design on `r` points chosen by pivoted Gram–Schmidt (largest
/// residual norm first), a spanning subset, so that the support only grows by the toward steps it
/// needs (Kumar & Yildirim 2005 use a similar small initial core set); this keeps the support, and
/// the Carathéodory work, small when `K >> r(r+1)/2`.
fn initial_design(points: &[DVector<f64>], r: usize, solver: DesignSolver) -> Vec<f64> {
    let k = points.len();
    let uniform = vec![1.0 / k as f64; k];
    if solver == DesignSolver::FrankWolfe || k <= r {
        return uniform;
    }
    let scale = points.iter().map(|x| x.norm_squared()).fold(0.0, f64::max);
    let mut resid: Vec<DVector<f64>> = points.to_vec();
    let mut chosen: Vec<usize> = Vec::with_capacity(r);
    for _ in 0..r {
        let (j, n2) = resid
            .iter()
            .enumerate()
            .filter(|(i, _)| !chosen.contains(i))
            .map(|(i, x)| (i, x.norm_squared()))
            .fold(
                (usize::MAX, 0.0),
                |b, (i, n)| if n > b.1 { (i, n) } else { b },
            );
        if j == usize::MAX || n2 <= 1e-12 * scale {
            return uniform;
        }
        chosen.push(j);
        let q = &resid[j] / n2.sqrt();
        for x in resid.iter_mut() {
            let p = q.dot(x);
            x.axpy(-p, &q, 1.0);
        }
    }
    let mut u = vec![0.0; k];
    for &j in &chosen {
        u[j] = 1.0 / r as f64;
    }
    u
}

fn not_spanning() -> Error {
    Error::param(
        "arms",
        "(a set that does not span its space)",
        "arms spanning R^r (project with Span::of first)",
    )
}

fn support_of(u: &[f64]) -> Vec<usize> {
    (0..u.len()).filter(|&i| u[i] > 0.0).collect()
}

/// Away-step Frank–Wolfe from the design `u` until `g <= target` (checked on an exact refresh) or
/// the iteration budget is spent.
fn run_away_fw(
    points: &[DVector<f64>],
    u: &mut [f64],
    target: f64,
    max_iterations: usize,
    iterations: &mut usize,
    away: bool,
) -> Result<()> {
    let r = points[0].len() as f64;
    let mut vinv = DMatrix::<f64>::zeros(0, 0);
    let mut omega = vec![0.0; points.len()];
    let mut since_refresh = usize::MAX;
    loop {
        if since_refresh >= REFRESH {
            let v = info_matrix(points, u);
            let chol = v.cholesky().ok_or_else(not_spanning)?;
            vinv = chol.inverse();
            for (o, x) in omega.iter_mut().zip(points) {
                *o = x.dot(&(&vinv * x));
            }
            since_refresh = 0;
        }
        let (jp, gp) =
            omega
                .iter()
                .copied()
                .enumerate()
                .fold(
                    (0, f64::NEG_INFINITY),
                    |b, (i, o)| if o > b.1 { (i, o) } else { b },
                );
        if gp <= target {
            if since_refresh == 0 {
                return Ok(());
            }
            since_refresh = REFRESH; // confirm on an exact refresh
            continue;
        }
        if *iterations >= max_iterations {
            return Ok(());
        }
        *iterations += 1;
        let (jm, om) = omega
            .iter()
            .copied()
            .enumerate()
            .filter(|&(i, _)| u[i] > 0.0)
            .fold(
                (0, f64::INFINITY),
                |b, (i, o)| if o < b.1 { (i, o) } else { b },
            );
        let toward = !away || gp / r - 1.0 >= 1.0 - om / r;
        let (j, tau) = if toward {
            (jp, (gp / r - 1.0) / (gp - 1.0))
        } else {
            let uj = u[jm];
            if uj >= 1.0 {
                // A single support point cannot be moved away from (only possible when r = 1,
                // where that point already has omega = 1 = r).
                (jp, (gp / r - 1.0) / (gp - 1.0))
            } else {
                let tau_min = -uj / (1.0 - uj);
                let tau = if om > 1.0 {
                    ((om / r - 1.0) / (om - 1.0)).max(tau_min)
                } else {
                    tau_min
                };
                (jm, tau)
            }
        };
        if tau >= 1.0 {
            u.iter_mut().for_each(|w| *w = 0.0);
            u[j] = 1.0;
            since_refresh = REFRESH;
            continue;
        }
        let drop = !toward && tau <= -u[j] / (1.0 - u[j]);
        for w in u.iter_mut() {
            *w *= 1.0 - tau;
        }
        u[j] += tau;
        if drop || u[j] < 0.0 {
            u[j] = 0.0;
        }
        // Sherman–Morrison: V' = (1 - tau) (V + s x x^T), s = tau / (1 - tau).
        let s = tau / (1.0 - tau);
        let y = &vinv * &points[j];
        let denom = 1.0 + s * omega[j];
        if denom <= 1e-12 {
            since_refresh = REFRESH;
            continue;
        }
        let c = s / denom;
        let scale = 1.0 / (1.0 - tau);
        vinv.ger(-c, &y, &y, 1.0);
        vinv *= scale;
        for (o, x) in omega.iter_mut().zip(points) {
            let p = x.dot(&y);
            *o = scale * (*o - c * p * p);
        }
        since_refresh += 1;
    }
}

/// Reduce the support of `u` to at most `m = r(r+1)/2` points by Carathéodory steps on
/// `vech(x x^T)`, renormalising the weights at the end.
fn caratheodory(points: &[DVector<f64>], u: &mut [f64], m: usize) {
    let r = points[0].len();
    let vech = |x: &DVector<f64>| -> Vec<f64> {
        let mut v = Vec::with_capacity(m);
        for i in 0..r {
            for j in i..r {
                v.push(x[i] * x[j]);
            }
        }
        v
    };
    loop {
        let supp = support_of(u);
        if supp.len() <= m {
            break;
        }
        // m + 1 points of the support: the m + 1 smallest weights (they are the cheapest to move).
        let mut idx = supp.clone();
        idx.sort_by(|&a, &b| u[a].total_cmp(&u[b]).then(a.cmp(&b)));
        idx.truncate(m + 1);
        let n = idx.len();
        let mut a = DMatrix::<f64>::zeros(m, n);
        for (c, &i) in idx.iter().enumerate() {
            let v = vech(&points[i]);
            for (row, val) in v.into_iter().enumerate() {
                a[(row, c)] = val;
            }
        }
        // Null vector of the m x (m+1) matrix: solve A[:, ..m] y = -A[:, m] by LU (c = (y, 1)),
        // or, if that block is singular, the eigenvector of A^T A with the smallest eigenvalue.
        let lu_null = a
            .columns(0, m)
            .into_owned()
            .lu()
            .solve(&(-a.column(m).into_owned()))
            .filter(|y| y.iter().all(|v| v.is_finite()))
            .map(|y| {
                let mut c: Vec<f64> = y.iter().copied().collect();
                c.push(1.0);
                c
            });
        let mut c: Vec<f64> = lu_null.unwrap_or_else(|| {
            let eig = a.tr_mul(&a).symmetric_eigen();
            let imin = (0..n)
                .min_by(|&x, &y| eig.eigenvalues[x].total_cmp(&eig.eigenvalues[y]))
                .expect("n >= 1");
            eig.eigenvectors.column(imin).iter().copied().collect()
        });
        if !c.iter().any(|&x| x > 0.0) {
            c.iter_mut().for_each(|x| *x = -*x);
        }
        // Largest step keeping every weight >= 0; the argmin reaches exactly zero.
        let (mut best, mut t) = (usize::MAX, f64::INFINITY);
        for (p, &i) in idx.iter().enumerate() {
            if c[p] > 1e-15 {
                let ti = u[i] / c[p];
                if ti < t {
                    t = ti;
                    best = p;
                }
            }
        }
        if best == usize::MAX {
            break;
        }
        for (p, &i) in idx.iter().enumerate() {
            u[i] = (u[i] - t * c[p]).max(0.0);
        }
        u[idx[best]] = 0.0;
    }
    let s: f64 = u.iter().sum();
    u.iter_mut().for_each(|w| *w /= s);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dv(v: &[f64]) -> DVector<f64> {
        DVector::from_column_slice(v)
    }

    /// Spec §8 T12: orthonormal arms -> uniform design with g = d exactly.
    #[test]
    fn orthonormal_arms_give_the_uniform_design() {
        for d in 1..=6 {
            let pts: Vec<_> = (0..d)
                .map(|i| {
                    let mut v = vec![0.0; d];
                    v[i] = 1.0;
                    dv(&v)
                })
                .collect();
            let des = g_optimal(&pts, DesignOptions::default()).unwrap();
            for &w in &des.weights {
                assert!((w - 1.0 / d as f64).abs() < 1e-12, "{:?}", des.weights);
            }
            assert!((des.g - d as f64).abs() < 1e-9);
            assert!(des.converged);
        }
    }

    #[test]
    fn span_of_planar_arms_has_rank_two() {
        let arms = vec![
            dv(&[1.0, 0.0, 0.0]),
            dv(&[0.0, 1.0, 0.0]),
            dv(&[0.6, 0.8, 0.0]),
        ];
        let s = Span::of(&arms);
        assert_eq!(s.rank(), 2);
        for (a, x) in arms.iter().zip(&s.coords) {
            assert!((&s.basis * x - a).norm() < 1e-12);
        }
        let des = g_optimal(&s.coords, DesignOptions::default()).unwrap();
        assert!(des.g <= 2.0 * (1.0 + 1e-3));
        // zero arms: rank 0
        assert_eq!(Span::of(&[dv(&[0.0, 0.0])]).rank(), 0);
    }

    #[test]
    fn non_spanning_points_are_an_error() {
        let pts = vec![dv(&[1.0, 0.0]), dv(&[2.0, 0.0])];
        let e = g_optimal(&pts, DesignOptions::default()).unwrap_err();
        assert!(e.to_string().contains("arms"), "{e}");
    }
}
