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

#[cfg(test)]
mod tests {
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
