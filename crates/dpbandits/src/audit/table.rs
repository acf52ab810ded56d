//! Neighbouring reward tables as environments of every setting.
//!
//! A [`RewardTable`] is fixed in advance: row `t` holds the potential rewards of user `t` (the
//! `t`-th round, or the `t`-th sample of a BAI run) for every arm. Every row equals the background
//! row, except the target row. Two neighbouring tables differ only in the target row: all its
//! entries at the top of the reward boundary in `D`, at the bottom in `D'` (Table DP, Azize &
//! Basu 2024, Def. 4 / Prop. 1: one user's rewards changed, the other users fixed). For a Joint-DP
//! kind the tables differ in the target row's context instead (its decision set negated in `D'`,
//! its rewards at the top in both) and that row's own action is left out of the audited output
//! (`joint`; Shariff & Sheffet 2018 Def. 2).
//!
//! The environments read the table: a finite [`Environment`] (also the reward environment of the
//! linear setting), a [`ContextualEnvironment`] whose decision set is the `k` unit vectors of
//! `R^k` every round (so the contextual policy faces a `k`-armed problem), and a
//! [`BaiEnvironment`] that counts its samples. No randomness: the only random streams of an audit
//! run are the policy's own.

use crate::bai::BaiEnvironment;
use crate::contextual::{ActionSet, ContextualEnvironment};
use crate::finite::Environment;

/// A reward table: a background row and one target row.
#[derive(Debug, Clone, PartialEq)]
pub struct RewardTable {
    /// Reward of every arm in every row except the target.
    pub background: Vec<f64>,
    /// The user whose rewards differ between the neighbours.
    pub target_row: u64,
    /// Every arm's reward in the target row.
    pub target_value: f64,
    /// Joint relation, neighbour side: the target row's decision set (context) is negated
    /// (contextual environment only).
    pub negated: bool,
    /// Joint relation: the target row's own action is not part of the audited output (Joint DP
    /// protects the other rounds' actions).
    pub joint: bool,
}

impl RewardTable {
    /// Reward of `arm` for user `t`.
    #[inline]
    pub fn reward(&self, arm: usize, t: u64) -> f64 {
        if t == self.target_row {
            self.target_value
        } else {
            self.background[arm]
        }
    }

    /// Sum of the rewards of `arm` for users `t .. t + n`.
    pub fn sum(&self, arm: usize, t: u64, n: u64) -> f64 {
        let mut s = self.background[arm] * n as f64;
        if (t..t.saturating_add(n)).contains(&self.target_row) {
            s += self.target_value - self.background[arm];
        }
        s
    }

    /// The smallest and largest reward in the table.
    pub fn range(&self) -> (f64, f64) {
        let (mut lo, mut hi) = (self.target_value, self.target_value);
        for &b in &self.background {
            lo = lo.min(b);
            hi = hi.max(b);
        }
        (lo, hi)
    }

    fn best_mean(&self) -> f64 {
        self.background
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max)
    }
}

/// The finite (and linear) environment of a table: round `t`'s reward of `arm` is row `t`.
#[derive(Debug, Clone)]
pub struct TableEnv(pub RewardTable);

impl Environment for TableEnv {
    fn reward_range(&self) -> (f64, f64) {
        self.0.range()
    }
    fn num_arms(&self) -> usize {
        self.0.background.len()
    }
    fn mean(&self, arm: usize, _t: u64) -> f64 {
        self.0.background[arm]
    }
    fn best_mean(&self, _t: u64) -> f64 {
        self.0.best_mean()
    }
    fn pull(&mut self, arm: usize, t: u64) -> f64 {
        self.0.reward(arm, t)
    }
    fn pull_sum(&mut self, arm: usize, t: u64, n: u64) -> f64 {
        self.0.sum(arm, t, n)
    }
}

/// The contextual environment of a table: actions `e_1 .. e_k` (`-e_1 .. -e_k` in the target row
/// of a table whose target is `negated`), rewards from row `t`, no noise.
#[derive(Debug, Clone)]
pub struct TableContextual {
    table: RewardTable,
    features: Vec<f64>,
    negated: Vec<f64>,
    current_negated: bool,
    means: Vec<f64>,
}

impl TableContextual {
    /// The environment of `table` (dimension = number of arms).
    pub fn new(table: RewardTable) -> Self {
        let k = table.background.len();
        let mut features = vec![0.0; k * k];
        for i in 0..k {
            features[i * k + i] = 1.0;
        }
        let means = table.background.clone();
        let negated = features.iter().map(|x| -x).collect();
        TableContextual {
            table,
            features,
            negated,
            current_negated: false,
            means,
        }
    }
}

impl ContextualEnvironment for TableContextual {
    fn dim(&self) -> usize {
        self.table.background.len()
    }
    fn next_round(&mut self, t: u64) {
        for (a, m) in self.means.iter_mut().enumerate() {
            *m = self.table.reward(a, t);
        }
        self.current_negated = self.table.negated && t == self.table.target_row;
    }
    fn actions(&self) -> ActionSet<'_> {
        let k = self.table.background.len();
        ActionSet {
            d: k,
            k,
            features: if self.current_negated {
                &self.negated
            } else {
                &self.features
            },
        }
    }
    fn means(&self) -> &[f64] {
        &self.means
    }
    fn best_mean(&self) -> f64 {
        self.means.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    }
    fn noise(&self) -> f64 {
        0.0
    }
}

/// The BAI environment of a table: sample `t` of the run (over all arms) is user `t`.
#[derive(Debug, Clone)]
pub struct TableBai {
    table: RewardTable,
    t: u64,
}

impl TableBai {
    /// The environment of `table`, at sample 0.
    pub fn new(table: RewardTable) -> Self {
        TableBai { table, t: 0 }
    }
}

impl BaiEnvironment for TableBai {
    fn reward_range(&self) -> (f64, f64) {
        self.table.range()
    }
    fn num_arms(&self) -> usize {
        self.table.background.len()
    }
    fn best_arm(&self) -> usize {
        crate::finite::argmax(self.table.background.iter().copied())
    }
    fn pull_sum(&mut self, arm: usize, n: u64) -> f64 {
        let s = self.table.sum(arm, self.t, n);
        self.t = self.t.saturating_add(n);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_read_the_table() {
        let t = RewardTable {
            background: vec![0.0, 1.0],
            target_row: 3,
            target_value: 1.0,
            negated: false,
            joint: false,
        };
        assert_eq!(t.sum(0, 0, 3), 0.0);
        assert_eq!(t.sum(0, 0, 4), 1.0);
        assert_eq!(t.sum(1, 2, 5), 5.0);
        let mut env = TableEnv(t.clone());
        assert_eq!(env.pull(0, 3), 1.0);
        assert_eq!(env.pull_sum(0, 3, 10), 1.0);
        let mut b = TableBai::new(t.clone());
        assert_eq!(b.pull_sum(0, 3), 0.0);
        assert_eq!(b.pull_sum(0, 1), 1.0);
        let t2 = t.clone();
        let mut c = TableContextual::new(t);
        c.next_round(3);
        assert_eq!(c.reward(0), 1.0);
        c.next_round(4);
        assert_eq!(c.reward(0), 0.0);
        assert_eq!(c.actions().action(1), &[0.0, 1.0]);
        let mut n = TableContextual::new(RewardTable {
            negated: true,
            joint: true,
            ..t2
        });
        n.next_round(3);
        assert_eq!(n.actions().action(1), &[0.0, -1.0]);
        n.next_round(4);
        assert_eq!(n.actions().action(1), &[0.0, 1.0]);
    }
}
