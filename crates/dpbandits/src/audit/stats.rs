//! The statistics of the auditor: candidate events over run features, event selection on one
//! half of the runs, and the Clopper–Pearson lower bound on epsilon on the other half.
//!
//! For an event `E` of the output, `p = P[E | D]` and `q = P[E | D']`. If the mechanism is
//! `(eps, delta)`-DP then `p <= e^eps q + delta`, so `eps >= ln((p - delta) / q)`. With a one-sided
//! lower Clopper–Pearson bound `p_lo` and an upper bound `q_hi`, each at level `alpha'`,
//! `ln((p_lo - delta) / q_hi)` is a lower bound on the true `eps(delta)` with probability at least
//! `1 - 2 alpha'`. With `m` events evaluated, `alpha' = alpha / (2 m)` (Bonferroni) makes the
//! maximum over the `m` events a `1 - alpha` lower bound. The bound of every `delta` uses the same
//! intervals, so it holds for all the stated deltas at once.
//!
//! Events are chosen on the first half of the runs (a cheap score: counts moved by `3 sqrt(x)`,
//! the direction `D` vs `D'` included), and only the `m` chosen events are evaluated, on the second
//! half: the correction counts the events evaluated, not the thousands of candidates.

use crate::math::stats::{clopper_pearson_lower, clopper_pearson_upper};
use serde::Serialize;
use std::collections::BTreeMap;

/// A comparison of one feature with a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `feature == v`
    Eq,
    /// `feature >= v`
    Ge,
    /// `feature <= v`
    Le,
}

/// An event `feature op value`, with the table whose probability is the numerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// Index of the feature.
    pub feature: usize,
    /// The comparison.
    pub op: Op,
    /// The value compared with.
    pub value: i64,
    /// `false`: `p` is estimated on `D` and `q` on `D'`; `true`: the other way round.
    pub swapped: bool,
}

impl Event {
    fn holds(&self, x: i64) -> bool {
        match self.op {
            Op::Eq => x == self.value,
            Op::Ge => x >= self.value,
            Op::Le => x <= self.value,
        }
    }

    /// `name op value` with the direction.
    pub fn describe(&self, names: &[String]) -> String {
        let op = match self.op {
            Op::Eq => "==",
            Op::Ge => ">=",
            Op::Le => "<=",
        };
        let dir = if self.swapped {
            "P[.|D']/P[.|D]"
        } else {
            "P[.|D]/P[.|D']"
        };
        format!("{} {op} {} ({dir})", names[self.feature], self.value)
    }
}

/// The bound given by one event on the evaluation half.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EventBound {
    /// The event, readable.
    pub event: String,
    /// `x / n` of the numerator table.
    pub p_hat: f64,
    /// `y / n` of the denominator table.
    pub q_hat: f64,
    /// Lower Clopper–Pearson bound of `p`.
    pub p_lo: f64,
    /// Upper Clopper–Pearson bound of `q`.
    pub q_hi: f64,
    /// `max(0, ln((p_lo - delta) / q_hi))`.
    pub eps_lower_bound: f64,
}

/// `ln((p - delta) / q)`, 0 when the numerator is not positive (no evidence).
pub fn eps_bound(p: f64, q: f64, delta: f64) -> f64 {
    if p - delta <= 0.0 {
        return 0.0;
    }
    if q <= 0.0 {
        return f64::INFINITY;
    }
    ((p - delta) / q).ln().max(0.0)
}

/// Counts of an event on the two tables.
fn counts(ev: &Event, d: &[Vec<i64>], d2: &[Vec<i64>]) -> (u64, u64) {
    let c = |runs: &[Vec<i64>]| runs.iter().filter(|r| ev.holds(r[ev.feature])).count() as u64;
    let (a, b) = (c(d), c(d2));
    if ev.swapped { (b, a) } else { (a, b) }
}

/// The best selection score over every candidate event on `(d, d2)` (0: none has evidence).
pub fn best_score(d: &[Vec<i64>], d2: &[Vec<i64>], delta: f64) -> f64 {
    scored(d, d2, delta).first().map_or(0.0, |s| s.0)
}

/// The `m` events with the best selection score on `(d, d2)` (runs x features), at `delta`.
pub fn select(d: &[Vec<i64>], d2: &[Vec<i64>], delta: f64, m: usize) -> Vec<Event> {
    let mut out: Vec<Event> = vec![];
    for (_, e) in scored(d, d2, delta) {
        if out.len() == m {
            break;
        }
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// Every candidate event with a positive selection score, best first (ties: by position).
fn scored(d: &[Vec<i64>], d2: &[Vec<i64>], delta: f64) -> Vec<(f64, Event)> {
    scored_by(d, d2, |p, q| eps_bound(p, q, delta))
}

/// Every candidate event with a positive score `f(p, q)`, best first (ties: by position), where
/// `p` and `q` are the event's frequencies on the two tables moved by `3 sqrt(count)` against
/// the event (a cheap stand-in for the evaluation's intervals).
fn scored_by(d: &[Vec<i64>], d2: &[Vec<i64>], f: impl Fn(f64, f64) -> f64) -> Vec<(f64, Event)> {
    let nf = d.first().map_or(0, Vec::len);
    let (n, n2) = (d.len() as f64, d2.len() as f64);
    let score = |x: u64, y: u64, xn: f64, yn: f64| {
        let (x, y) = (x as f64, y as f64);
        let p = ((x - 3.0 * x.sqrt()) / xn).max(0.0);
        let q = (y + 3.0 * y.sqrt() + 9.0) / yn;
        f(p, q)
    };
    let mut scored: Vec<(f64, Event)> = vec![];
    for f in 0..nf {
        let mut hist: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for r in d {
            hist.entry(r[f]).or_default().0 += 1;
        }
        for r in d2 {
            hist.entry(r[f]).or_default().1 += 1;
        }
        if hist.len() < 2 {
            continue;
        }
        let (tot_a, tot_b) = (d.len() as u64, d2.len() as u64);
        let mut below = (0u64, 0u64); // counts of values < v
        for (&v, &(a, b)) in &hist {
            let le = (below.0 + a, below.1 + b);
            let ge = (tot_a - below.0, tot_b - below.1);
            for (op, (ca, cb)) in [(Op::Eq, (a, b)), (Op::Le, le), (Op::Ge, ge)] {
                for swapped in [false, true] {
                    let s = if swapped {
                        score(cb, ca, n2, n)
                    } else {
                        score(ca, cb, n, n2)
                    };
                    if s > 0.0 {
                        scored.push((
                            s,
                            Event {
                                feature: f,
                                op,
                                value: v,
                                swapped,
                            },
                        ));
                    }
                }
            }
            below = le;
        }
    }
    // best first; ties broken by the event's position (deterministic)
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored
}

/// Evaluate `events` on `(d, d2)`: for each delta, the best bound and its event. Each interval
/// is at level `alpha / (2 * events.len())`.
pub fn evaluate(
    events: &[Event],
    d: &[Vec<i64>],
    d2: &[Vec<i64>],
    deltas: &[f64],
    alpha: f64,
    names: &[String],
) -> Vec<Option<EventBound>> {
    let a = alpha / (2.0 * events.len().max(1) as f64);
    let mut best: Vec<Option<EventBound>> = vec![None; deltas.len()];
    for ev in events {
        let (x, y) = counts(ev, d, d2);
        let (nx, ny) = if ev.swapped {
            (d2.len() as u64, d.len() as u64)
        } else {
            (d.len() as u64, d2.len() as u64)
        };
        let p_lo = clopper_pearson_lower(x, nx, a);
        let q_hi = clopper_pearson_upper(y, ny, a);
        for (slot, &delta) in best.iter_mut().zip(deltas) {
            let b = eps_bound(p_lo, q_hi, delta);
            if slot.as_ref().is_none_or(|s| b > s.eps_lower_bound) {
                *slot = Some(EventBound {
                    event: ev.describe(names),
                    p_hat: x as f64 / nx as f64,
                    q_hat: y as f64 / ny as f64,
                    p_lo,
                    q_hi,
                    eps_lower_bound: b,
                });
            }
        }
    }
    best
}

/// The privacy curve a claim implies: the claimed `epsilon(delta)` on a grid of deltas (the
/// whole-curve mode of the black-box audit, for zCDP kinds: Delta-Siege's idea of attacking the
/// (epsilon, delta) curve where the test is most powerful instead of at one delta).
#[derive(Debug, Clone)]
pub struct Curve {
    /// The deltas, increasing.
    pub deltas: Vec<f64>,
    /// The claimed epsilon at each delta.
    pub claims: Vec<f64>,
}

impl Curve {
    /// `points` deltas log-spaced in `[lo, hi]`, with the claim `claim(delta)`.
    ///
    /// # Errors
    /// The claim's errors.
    pub fn new(
        lo: f64,
        hi: f64,
        points: usize,
        claim: impl Fn(f64) -> crate::error::Result<f64>,
    ) -> crate::error::Result<Curve> {
        let deltas: Vec<f64> = (0..points)
            .map(|i| lo * (hi / lo).powf(i as f64 / (points - 1).max(1) as f64))
            .collect();
        let claims = deltas
            .iter()
            .map(|&d| claim(d))
            .collect::<crate::error::Result<_>>()?;
        Ok(Curve { deltas, claims })
    }

    /// The largest `eps_bound(p, q, delta) / claim(delta)` over the grid, and its index.
    pub fn best(&self, p: f64, q: f64) -> (f64, usize) {
        let mut best = (0.0, 0);
        for (i, (&d, &c)) in self.deltas.iter().zip(&self.claims).enumerate() {
            let r = eps_bound(p, q, d) / c;
            if r > best.0 {
                best = (r, i);
            }
        }
        best
    }
}

/// The best selection score along `curve` over every candidate event on `(d, d2)`.
pub fn best_score_on_curve(d: &[Vec<i64>], d2: &[Vec<i64>], curve: &Curve) -> f64 {
    scored_by(d, d2, |p, q| curve.best(p, q).0)
        .first()
        .map_or(0.0, |s| s.0)
}

/// The `m` events with the best selection score along `curve` (the largest ratio of the
/// bound to the claim over its deltas) on `(d, d2)`.
pub fn select_on_curve(d: &[Vec<i64>], d2: &[Vec<i64>], curve: &Curve, m: usize) -> Vec<Event> {
    let mut out: Vec<Event> = vec![];
    for (_, e) in scored_by(d, d2, |p, q| curve.best(p, q).0) {
        if out.len() == m {
            break;
        }
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

/// The point of a curve where the evidence is strongest.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CurvePoint {
    /// The delta of the point.
    pub delta: f64,
    /// The claimed epsilon there.
    pub claimed: f64,
    /// The lower bound there.
    pub eps_lower_bound: f64,
    /// `eps_lower_bound / claimed`.
    pub ratio: f64,
    /// The event and its intervals.
    pub event: EventBound,
}

/// Evaluate `events` on `(d, d2)` along `curve`: the point (event, delta) with the largest ratio
/// of the lower bound to the claim. Each interval at level `alpha / (2 * events.len())`, the
/// same as [`evaluate`]'s, so with the same events both hold at once (the deltas share the
/// intervals).
pub fn evaluate_on_curve(
    events: &[Event],
    d: &[Vec<i64>],
    d2: &[Vec<i64>],
    curve: &Curve,
    alpha: f64,
    names: &[String],
) -> Option<CurvePoint> {
    let a = alpha / (2.0 * events.len().max(1) as f64);
    let mut best: Option<CurvePoint> = None;
    for ev in events {
        let (x, y) = counts(ev, d, d2);
        let (nx, ny) = if ev.swapped {
            (d2.len() as u64, d.len() as u64)
        } else {
            (d.len() as u64, d2.len() as u64)
        };
        let p_lo = clopper_pearson_lower(x, nx, a);
        let q_hi = clopper_pearson_upper(y, ny, a);
        let (ratio, i) = curve.best(p_lo, q_hi);
        if best.as_ref().is_none_or(|b| ratio > b.ratio) {
            let delta = curve.deltas[i];
            let eps = eps_bound(p_lo, q_hi, delta);
            best = Some(CurvePoint {
                delta,
                claimed: curve.claims[i],
                eps_lower_bound: eps,
                ratio,
                event: EventBound {
                    event: ev.describe(names),
                    p_hat: x as f64 / nx as f64,
                    q_hat: y as f64 / ny as f64,
                    p_lo,
                    q_hi,
                    eps_lower_bound: eps,
                },
            });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(values: &[(i64, usize)]) -> Vec<Vec<i64>> {
        values
            .iter()
            .flat_map(|&(v, n)| std::iter::repeat_n(vec![v], n))
            .collect()
    }

    #[test]
    fn bound_formula() {
        assert_eq!(eps_bound(0.5, 0.05, 0.0), 10f64.ln());
        assert_eq!(eps_bound(0.1, 0.05, 0.2), 0.0);
        assert_eq!(eps_bound(0.04, 0.05, 0.0), 0.0);
        assert!(eps_bound(0.5, 0.0, 0.0).is_infinite());
    }

    /// A feature that is 1 in 90% of runs on D and 10% on D': the bound is near ln 9 minus the
    /// interval widths, and the event selected is the right one (either direction).
    #[test]
    fn separated_tables_give_a_large_bound() {
        let d = runs(&[(1, 900), (0, 100)]);
        let d2 = runs(&[(1, 100), (0, 900)]);
        let names = vec!["x".to_string()];
        let ev = select(&d, &d2, 0.0, 3);
        assert!(!ev.is_empty());
        let b = evaluate(&ev, &d, &d2, &[0.0, 0.5], 0.05, &names);
        let b0 = b[0].as_ref().unwrap();
        assert!(
            b0.eps_lower_bound > 1.6 && b0.eps_lower_bound < 9f64.ln(),
            "{b0:?}"
        );
        // a large delta removes most of the evidence
        assert!(b[1].as_ref().unwrap().eps_lower_bound < b0.eps_lower_bound);
    }

    /// Identical tables: no event passes selection, or the bound is small.
    #[test]
    fn identical_tables_give_no_evidence() {
        let d = runs(&[(0, 500), (1, 300), (2, 200)]);
        let ev = select(&d, &d, 0.0, 3);
        let names = vec!["x".to_string()];
        let b = evaluate(&ev, &d, &d, &[0.0], 0.05, &names);
        assert!(b[0].as_ref().is_none_or(|b| b.eps_lower_bound == 0.0));
    }

    /// The curve point: on separated tables the best ratio is found at a delta inside the grid
    /// and equals the bound there over the claim; identical tables give no point above 0.
    #[test]
    fn curve_point_is_the_best_ratio() {
        let curve = Curve::new(1e-6, 0.5, 41, |d| Ok(1.0 + (1.0 / d).ln().sqrt())).unwrap();
        assert_eq!(curve.deltas.len(), 41);
        assert!((curve.deltas[0] - 1e-6).abs() < 1e-18 && (curve.deltas[40] - 0.5).abs() < 1e-12);
        let d = runs(&[(1, 900), (0, 100)]);
        let d2 = runs(&[(1, 100), (0, 900)]);
        let names = vec!["x".to_string()];
        let ev = select_on_curve(&d, &d2, &curve, 3);
        let c = evaluate_on_curve(&ev, &d, &d2, &curve, 0.05, &names).unwrap();
        assert!(c.ratio > 0.0 && (c.ratio - c.eps_lower_bound / c.claimed).abs() < 1e-12);
        for (&dd, &cl) in curve.deltas.iter().zip(&curve.claims) {
            assert!(eps_bound(c.event.p_lo, c.event.q_hi, dd) / cl <= c.ratio + 1e-12);
        }
        let same = evaluate_on_curve(&ev, &d, &d, &curve, 0.05, &names).unwrap();
        assert!(same.ratio < 0.2, "{same:?}");
    }
}
