//! A privacy accountant with a cap: sequential composition of pure-DP or zCDP losses.
//!
//! # Composition rules
//! * Sequential composition (releases on the same data): pure-DP losses add (Dwork & Roth 2014,
//!   Thm 3.16), zCDP losses add (Bun & Steinke 2016, Lemma 2.3).
//! * Parallel composition (releases on disjoint data, e.g. disjoint episodes of a bandit run):
//!   the loss is the maximum of the parts (Azize & Basu 2024, Lemma 1; McSherry 2009).
//! * A pure-DP loss charged to a zCDP accountant is converted to `epsilon^2 / 2` (Bun & Steinke,
//!   Prop. 1.4, [`pure_to_zcdp`], rounded up). A zCDP loss cannot be charged to a pure-DP
//!   accountant (zCDP does not imply pure DP).
//!
//! # Refusal
//! [`PrivacyAccountant::charge`] refuses a charge that would take the spent loss over the cap with
//! [`Error::BudgetExceeded`] and leaves the accountant exactly as it was (tested).
//!
//! # Rounding
//! Running totals are rounded **up**: each addition is checked with an exact two-sum and nudged
//! one ulp up when floating point rounded it down, so the reported spent loss is never below the
//! real one.

use super::Budget;
use super::conversion::{ZcdpConversion, pure_to_zcdp, zcdp_to_approx_dp};
use crate::error::{Error, Result};

/// `a + b` rounded up (exact TwoSum error term; Knuth).
pub fn add_up(a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return s;
    }
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    if err > 0.0 { s.next_up() } else { s }
}

/// The currency of an accountant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Currency {
    Pure,
    Zcdp,
}

/// Tracks the spent loss against a cap; refuses charges over the cap.
#[derive(Debug, Clone, PartialEq)]
pub struct PrivacyAccountant {
    currency: Currency,
    cap: f64,
    spent: f64,
    charges: u64,
}

impl PrivacyAccountant {
    /// An accountant with cap `Budget::PureDp { epsilon }` or `Budget::Zcdp { rho }` (finite, > 0).
    ///
    /// # Errors
    /// Other budget kinds, or a cap that is not a finite number > 0.
    pub fn new(cap: Budget) -> Result<Self> {
        let (currency, value, field) = match cap {
            Budget::PureDp { epsilon } => (Currency::Pure, epsilon, "epsilon"),
            Budget::Zcdp { rho } => (Currency::Zcdp, rho, "rho"),
            other => {
                return Err(Error::param(
                    "cap",
                    other,
                    "a pure-DP (epsilon) or zCDP (rho) budget",
                ));
            }
        };
        if !(value.is_finite() && value > 0.0) {
            return Err(Error::param(field, value, "a finite number > 0"));
        }
        Ok(PrivacyAccountant {
            currency,
            cap: value,
            spent: 0.0,
            charges: 0,
        })
    }

    /// The loss `loss` expressed in this accountant's currency (rounded up).
    ///
    /// # Errors
    /// A zCDP loss on a pure-DP accountant, an approximate-DP or non-private loss, a negative or
    /// NaN loss.
    pub fn cost_of(&self, loss: Budget) -> Result<f64> {
        let v = match (self.currency, loss) {
            (Currency::Pure, Budget::PureDp { epsilon }) => epsilon,
            (Currency::Zcdp, Budget::Zcdp { rho }) => rho,
            (Currency::Zcdp, Budget::PureDp { epsilon }) => pure_to_zcdp(epsilon)?,
            (Currency::Pure, Budget::Zcdp { rho }) => {
                return Err(Error::param(
                    "loss",
                    format!("rho = {rho}"),
                    "a pure-DP loss (zCDP does not imply pure DP)",
                ));
            }
            (_, other) => {
                return Err(Error::param(
                    "loss",
                    other,
                    "a pure-DP (epsilon) or zCDP (rho) loss",
                ));
            }
        };
        if v.is_nan() || v < 0.0 {
            return Err(Error::param("loss", v, "a number >= 0"));
        }
        Ok(v)
    }

    fn try_add(&self, cost: f64) -> Result<f64> {
        let total = add_up(self.spent, cost);
        if total > self.cap {
            return Err(Error::BudgetExceeded {
                requested: cost,
                spent: self.spent,
                cap: self.cap,
            });
        }
        Ok(total)
    }

    /// Charge one release (sequential composition). On refusal nothing changes.
    ///
    /// # Errors
    /// [`Error::BudgetExceeded`] over the cap; see [`Self::cost_of`] for invalid losses.
    pub fn charge(&mut self, loss: Budget) -> Result<()> {
        let cost = self.cost_of(loss)?;
        self.spent = self.try_add(cost)?;
        self.charges += 1;
        Ok(())
    }

    /// Charge releases computed on **disjoint** parts of the data (parallel composition: the
    /// maximum of the parts). On refusal nothing changes.
    ///
    /// # Errors
    /// As [`Self::charge`].
    pub fn charge_parallel(&mut self, losses: &[Budget]) -> Result<()> {
        let mut worst = 0.0f64;
        for &l in losses {
            worst = worst.max(self.cost_of(l)?);
        }
        self.spent = self.try_add(worst)?;
        self.charges += 1;
        Ok(())
    }

    /// The spent loss as a budget.
    pub fn spent(&self) -> Budget {
        self.budget(self.spent)
    }

    /// The cap as a budget.
    pub fn cap(&self) -> Budget {
        self.budget(self.cap)
    }

    /// What is left (`cap - spent`, rounded down, >= 0).
    pub fn remaining(&self) -> f64 {
        let r = self.cap - self.spent;
        if r <= 0.0 {
            0.0
        } else if add_up(r, self.spent) > self.cap {
            r.next_down()
        } else {
            r
        }
    }

    /// Number of accepted charges.
    pub fn charges(&self) -> u64 {
        self.charges
    }

    /// The spent loss as `(epsilon, delta)`-DP: pure DP is `(epsilon, 0)` and hence
    /// `(epsilon, delta)` for every delta; zCDP is converted by `how`.
    ///
    /// # Errors
    /// `delta` must be in (0, 1).
    pub fn approx_dp(&self, delta: f64, how: ZcdpConversion) -> Result<Budget> {
        if !(delta > 0.0 && delta < 1.0) {
            return Err(Error::param(
                "delta",
                delta,
                "a number in the open interval (0, 1)",
            ));
        }
        let epsilon = match self.currency {
            Currency::Pure => self.spent,
            Currency::Zcdp if self.spent == 0.0 => 0.0,
            Currency::Zcdp => zcdp_to_approx_dp(self.spent, delta, how)?,
        };
        Ok(Budget::ApproxDp { epsilon, delta })
    }

    fn budget(&self, v: f64) -> Budget {
        match self.currency {
            Currency::Pure => Budget::PureDp { epsilon: v },
            Currency::Zcdp => Budget::Zcdp { rho: v },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sequential_and_parallel_composition() {
        // spec ldp §7.5.2: k Laplace answers cost k eps; a disjoint (parallel) release costs eps.
        let mut a = PrivacyAccountant::new(Budget::PureDp { epsilon: 1.0 }).unwrap();
        for _ in 0..4 {
            a.charge(Budget::PureDp { epsilon: 0.25 }).unwrap();
        }
        assert_eq!(a.spent(), Budget::PureDp { epsilon: 1.0 });
        assert_eq!(a.remaining(), 0.0);
        assert_eq!(a.charges(), 4);
        let mut b = PrivacyAccountant::new(Budget::PureDp { epsilon: 1.0 }).unwrap();
        b.charge_parallel(&[Budget::PureDp { epsilon: 0.5 }; 10])
            .unwrap();
        assert_eq!(b.spent(), Budget::PureDp { epsilon: 0.5 });
        // pure DP charged to a zCDP accountant: eps^2/2
        let mut z = PrivacyAccountant::new(Budget::Zcdp { rho: 1.0 }).unwrap();
        z.charge(Budget::PureDp { epsilon: 1.0 }).unwrap();
        assert_eq!(z.spent(), Budget::Zcdp { rho: 0.5 });
        let Budget::ApproxDp { epsilon, .. } = z.approx_dp(1e-6, ZcdpConversion::Cks2020).unwrap()
        else {
            panic!("not approx dp")
        };
        assert!(epsilon > 0.5 && epsilon < 6.0);
        // zCDP cannot be charged to a pure accountant; bad caps are refused
        assert!(b.charge(Budget::Zcdp { rho: 0.1 }).is_err());
        assert!(PrivacyAccountant::new(Budget::NonPrivate).is_err());
        assert!(PrivacyAccountant::new(Budget::Zcdp { rho: f64::INFINITY }).is_err());
        assert!(b.charge(Budget::PureDp { epsilon: -1.0 }).is_err());
        assert!(z.approx_dp(0.0, ZcdpConversion::Cks2020).is_err());
    }

    #[test]
    fn refusal_message() {
        let mut a = PrivacyAccountant::new(Budget::Zcdp { rho: 0.1 }).unwrap();
        let e = a.charge(Budget::Zcdp { rho: 0.2 }).unwrap_err().to_string();
        assert!(e.contains("budget exceeded") && e.contains("0.2"), "{e}");
    }

    fn value(b: Budget) -> f64 {
        match b {
            Budget::Zcdp { rho } => rho,
            Budget::PureDp { epsilon } => epsilon,
            _ => unreachable!(),
        }
    }

    proptest! {
        /// A refused charge changes nothing; an accepted one never leaves spent above the cap, and
        /// each new total is never below the exact sum (old total + charge).
        #[test]
        fn refused_charge_changes_nothing(
            cap in 0.01f64..10.0,
            charges in proptest::collection::vec(0.0f64..3.0, 1..40),
            zcdp in any::<bool>(),
        ) {
            let cap_b = if zcdp { Budget::Zcdp { rho: cap } } else { Budget::PureDp { epsilon: cap } };
            let mut a = PrivacyAccountant::new(cap_b).unwrap();
            for c in charges {
                let loss = if zcdp { Budget::Zcdp { rho: c } } else { Budget::PureDp { epsilon: c } };
                let before = a.clone();
                let old = value(a.spent());
                match a.charge(loss) {
                    Ok(()) => {
                        // the new total is >= old + c exactly (TwoSum: s + err == old + c)
                        let new = value(a.spent());
                        let s = old + c;
                        let bb = s - old;
                        let err = (old - (s - bb)) + (c - bb);
                        prop_assert!(new > s || (new == s && err <= 0.0));
                    }
                    Err(Error::BudgetExceeded { .. }) => prop_assert_eq!(&a, &before),
                    Err(e) => prop_assert!(false, "unexpected {}", e),
                }
                prop_assert!(value(a.spent()) <= cap);
            }
        }
    }
}
