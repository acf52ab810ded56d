//! Summary statistics over runs, and the two-sample tests used by statistical tests.

use serde::Serialize;

/// Mean, spread and quantiles of one checkpoint over runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of runs.
    pub runs: usize,
    /// Sample mean.
    pub mean: f64,
    /// Sample standard deviation (n - 1 in the denominator; 0 for one run).
    pub std: f64,
    /// Standard error of the mean.
    pub sem: f64,
    /// 5% quantile.
    pub q05: f64,
    /// Median.
    pub q50: f64,
    /// 95% quantile.
    pub q95: f64,
}

impl Summary {
    /// Summarise `values` (sorted in place; quantiles by linear interpolation, Hyndman-Fan type 7).
    pub fn of(values: &mut [f64]) -> Summary {
        let n = values.len();
        if n == 0 {
            return Summary {
                runs: 0,
                mean: f64::NAN,
                std: f64::NAN,
                sem: f64::NAN,
                q05: f64::NAN,
                q50: f64::NAN,
                q95: f64::NAN,
            };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        values.sort_by(f64::total_cmp);
        let std = var.sqrt();
        Summary {
            runs: n,
            mean,
            std,
            sem: std / (n as f64).sqrt(),
            q05: quantile_sorted(values, 0.05),
            q50: quantile_sorted(values, 0.5),
            q95: quantile_sorted(values, 0.95),
        }
    }
}

/// Type-7 quantile of sorted data.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    if n == 1 {
        return sorted[0];
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

/// Two-sample Kolmogorov-Smirnov statistic `D = sup |F1 - F2|`.
pub fn ks_statistic(a: &[f64], b: &[f64]) -> f64 {
    let mut a = a.to_vec();
    let mut b = b.to_vec();
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (n, m) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0usize, 0usize, 0.0f64);
    while i < a.len() && j < b.len() {
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / n - j as f64 / m).abs());
    }
    d
}

/// Asymptotic critical value of the two-sample KS test at level `alpha`:
/// `c(alpha) sqrt((n + m)/(n m))` with `c(alpha) = sqrt(-ln(alpha/2)/2)`.
pub fn ks_critical(n: usize, m: usize, alpha: f64) -> f64 {
    let c = (-(alpha / 2.0).ln() / 2.0).sqrt();
    c * ((n + m) as f64 / (n as f64 * m as f64)).sqrt()
}

/// One-sided upper `1 - alpha` Clopper–Pearson bound for a binomial proportion (`x` of `n`).
pub fn clopper_pearson_upper(x: u64, n: u64, alpha: f64) -> f64 {
    if n == 0 {
        return 1.0;
    }
    if x >= n {
        return 1.0;
    }
    // P(Bin(n, p) <= x) is decreasing in p; find p with it equal to alpha.
    let cdf = |p: f64| -> f64 {
        let (lp, lq) = (p.ln(), (-p).ln_1p());
        let mut lc = 0.0; // ln C(n, i)
        let mut terms = Vec::with_capacity(x as usize + 1);
        for i in 0..=x {
            if i > 0 {
                lc += ((n - i + 1) as f64).ln() - (i as f64).ln();
            }
            terms.push(lc + i as f64 * lp + (n - i) as f64 * lq);
        }
        let m = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (m + terms.iter().map(|t| (t - m).exp()).sum::<f64>().ln()).exp()
    };
    let (mut lo, mut hi) = (x as f64 / n as f64, 1.0);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if cdf(mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// One-sided lower `1 - alpha` Clopper–Pearson bound for a binomial proportion (`x` of `n`):
/// `1 - clopper_pearson_upper(n - x, n, alpha)` (the lower bound of `p` is one minus the upper
/// bound of `1 - p`).
pub fn clopper_pearson_lower(x: u64, n: u64, alpha: f64) -> f64 {
    if n == 0 || x == 0 {
        return 0.0;
    }
    (1.0 - clopper_pearson_upper(n - x.min(n), n, alpha)).max(0.0)
}

/// `Phi^-1(p)`, the standard normal quantile (Acklam's rational approximation: relative error
/// below `1.2e-9` on (0, 1), ample for an interval's `z`).
pub fn normal_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return f64::NAN;
    }
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let lo = 0.02425;
    if p < lo {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lo {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn clopper_pearson_lower_bound() {
        use super::clopper_pearson_lower;
        // 1000 of 1000 -> 0.05^(1/1000) = 0.997009; 95 of 100 -> 1 - 0.1024 (mirror of 5 of 100).
        assert!((clopper_pearson_lower(1000, 1000, 0.05) - 0.997_009).abs() < 2e-6);
        assert!((clopper_pearson_lower(95, 100, 0.05) - (1.0 - 0.1024)).abs() < 5e-4);
        assert_eq!(clopper_pearson_lower(0, 10, 0.05), 0.0);
        // coverage by simulation-free check: the bound is below the estimate.
        for x in [1u64, 10, 50, 99] {
            assert!(clopper_pearson_lower(x, 100, 0.01) < x as f64 / 100.0);
        }
    }

    #[test]
    fn clopper_pearson() {
        use super::clopper_pearson_upper;
        // Known values: 0 of 1000 -> 1 - 0.05^(1/1000) = 0.002991; 5 of 100 -> 0.1024 (one-sided 95%).
        assert!((clopper_pearson_upper(0, 1000, 0.05) - 0.002_991).abs() < 2e-6);
        assert!((clopper_pearson_upper(5, 100, 0.05) - 0.1024).abs() < 5e-4);
        assert_eq!(clopper_pearson_upper(3, 3, 0.05), 1.0);
    }

    use super::*;

    #[test]
    fn summary_of_known_data() {
        let mut v = vec![3.0, 1.0, 2.0, 4.0, 5.0];
        let s = Summary::of(&mut v);
        assert_eq!(s.mean, 3.0);
        assert!((s.std - 2.5f64.sqrt()).abs() < 1e-15);
        assert_eq!(s.q50, 3.0);
        assert!((s.q05 - 1.2).abs() < 1e-12);
        assert!((s.q95 - 4.8).abs() < 1e-12);
    }

    #[test]
    fn ks_detects_shift_and_accepts_equal() {
        let a: Vec<f64> = (0..1000).map(|i| i as f64 / 1000.0).collect();
        let b: Vec<f64> = (0..1000).map(|i| i as f64 / 1000.0 + 0.2).collect();
        assert!(ks_statistic(&a, &b) > ks_critical(1000, 1000, 1e-3));
        assert!(ks_statistic(&a, &a) < 1e-12);
    }
}
