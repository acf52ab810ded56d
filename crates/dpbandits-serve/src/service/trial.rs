//! A trial's service parts (issue 43): late outcomes kept, the reward-deadline timer, bulk
//! abandon, the interim look and the monitor's numbers.

use super::create::core_error;
use super::*;
use dpbandits::report::{OutcomeCounts, Report, Validity};

impl Service {
    /// A true outcome reported after its decision was abandoned: stored with the decision
    /// (`late_reward`, `late_received`), logged (`late-outcome`) and exported, never given to
    /// the policy (its input was the dropout reward, and the release that used it may be
    /// published). The first late report is kept; a later one answers `duplicate`. The reward
    /// must be a finite number (the boundary's range is not applied: nothing private is
    /// computed from it).
    pub(super) fn late_outcome(
        &mut self,
        name: &str,
        decision_id: u64,
        arm: usize,
        reward: f64,
    ) -> ServiceResult<Value> {
        if !reward.is_finite() {
            return Err(ServiceError::invalid(
                "reward",
                format!("reward = {reward}: expected a finite number"),
            ));
        }
        let tx = self.store.begin()?;
        if !tx.record_late(name, decision_id, reward)? {
            drop(tx);
            return Ok(
                json!({"decision_id": decision_id, "status": "duplicate", "abandoned": true,
                "note": "a late outcome of this abandoned decision is stored already; this report was not stored"}),
            );
        }
        tx.audit(
            name,
            store::Event::LateOutcome,
            &json!({"decision_id": decision_id, "arm": arm, "reward": reward}),
        )?;
        tx.commit()?;
        Ok(
            json!({"decision_id": decision_id, "status": "late", "stored": true,
            "note": "the decision was abandoned (its dropout reward was given to the policy); this late outcome is stored, logged and exported, not given to the policy"}),
        )
    }

    /// Abandon the decisions of `name` past its `reward_deadline` now (`close` with
    /// `abandon_overdue`); refused naming `reward_deadline` when it has none.
    ///
    /// # Errors
    /// No deadline, or as [`Service::reward`].
    pub fn expire_now(&mut self, name: &str) -> ServiceResult<()> {
        let e = self.experiment(name)?;
        if e.deadline.is_none() || e.dropout.is_none() {
            return Err(ServiceError::invalid(
                "abandon_overdue",
                format!(
                    "abandon_overdue = true: experiment {name:?} has no reward_deadline (and dropout_reward); abandon decisions with POST /v1/experiments/{name}/abandon instead"
                ),
            ));
        }
        if e.closed.is_some() {
            return Ok(());
        }
        self.expire(name)
    }

    /// Abandon every decision past its experiment's `reward_deadline`, in every open experiment
    /// with one (the service's timer runs this; `docs/service.md`, "Delayed outcomes"). Returns
    /// how many were abandoned.
    ///
    /// # Errors
    /// As [`Service::reward`].
    pub fn expire_all(&mut self) -> ServiceResult<u64> {
        let due: Vec<String> = self
            .experiments
            .iter()
            .filter(|(_, e)| e.deadline.is_some() && e.dropout.is_some() && e.closed.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        let mut n = 0;
        for name in due {
            let before = self.experiment(&name)?.session.pending();
            self.expire(&name)?;
            n += before.saturating_sub(self.experiment(&name)?.session.pending());
        }
        Ok(n)
    }

    /// Abandon pending decisions in bulk (admin): those issued at least `older_than` seconds
    /// ago (`0`: every pending decision), oldest first, each recorded as the experiment's
    /// `dropout_reward` as [`Service::abandon`] does. Returns the abandoned ids.
    ///
    /// # Errors
    /// No `dropout_reward`, a bad `older_than`, or as [`Service::abandon`].
    pub fn abandon_pending(&mut self, name: &str, older_than: f64) -> ServiceResult<Value> {
        if !(older_than.is_finite() && older_than >= 0.0) {
            return Err(ServiceError::invalid(
                "older_than",
                format!("older_than = {older_than}: expected seconds, a finite number >= 0"),
            ));
        }
        let e = self.experiment(name)?;
        if e.closed.is_some() {
            return Err(ServiceError::Closed { name: name.into() });
        }
        let Some(d) = e.dropout else {
            return Err(ServiceError::invalid(
                "dropout_reward",
                format!(
                    "dropout_reward = (not set): experiment {name:?} was created without a dropout reward, so a decision cannot be abandoned"
                ),
            ));
        };
        let cutoff = store::unix_now() - older_than;
        let ids = if older_than == 0.0 {
            self.store.pending_decisions(name)?
        } else {
            self.store.expired_decisions(name, cutoff)?
        };
        for &id in &ids {
            self.apply(name, id, d, Some("bulk"))?;
        }
        Ok(json!({"experiment": name, "abandoned": ids.len(), "decision_ids": ids}))
    }

    /// The per-arm outcome counts (observed, imputed, late) of `rows`
    /// ([`store::outcome_counts`]), for the report.
    fn counts_of(rows: &[(usize, [u64; 4])], arms: usize) -> OutcomeCounts {
        let mut c = OutcomeCounts {
            observed: vec![0; arms],
            imputed: vec![0; arms],
            late: vec![0; arms],
        };
        for &(arm, [obs, imp, late, _]) in rows {
            if arm < arms {
                c.observed[arm] = obs;
                c.imputed[arm] = imp;
                c.late[arm] = late;
            }
        }
        c
    }

    /// The core report of `name` at `level` (`validity`: at close, or anytime for an interim
    /// look), with the outcome counts of a finite-armed or BAI experiment (from `rows` when the
    /// caller has read them already, else read here).
    pub(super) fn core_report(
        &self,
        name: &str,
        level: f64,
        validity: Validity,
        rows: Option<&[(usize, [u64; 4])]>,
    ) -> ServiceResult<Report> {
        let e = self.experiment(name)?;
        let counts = if e.session.setting() == Setting::Contextual {
            None
        } else {
            Some(match rows {
                Some(rows) => Self::counts_of(rows, e.arms),
                None => Self::counts_of(&self.store.outcome_counts(name)?, e.arms),
            })
        };
        e.session
            .report_with(level, validity, counts.as_ref(), None)
            .map_err(|err| core_error(err, "level"))
    }

    /// An interim look (admin): per-arm estimates and intervals at `level` (default 0.95) from
    /// released statistics only, valid simultaneously under any number of looks
    /// (`dpbandits::report::Validity::Anytime`), with the outcome counts and the ledger. Costs no
    /// budget and draws nothing; logged nowhere (a look changes nothing).
    ///
    /// # Errors
    /// No such experiment, a bad `level`.
    pub fn interim(&self, name: &str, level: Option<f64>) -> ServiceResult<Value> {
        self.interim_of(name, level, None)
    }

    /// [`Service::interim`] with the outcome rows already read (the monitor reads them once).
    fn interim_of(
        &self,
        name: &str,
        level: Option<f64>,
        rows: Option<&[(usize, [u64; 4])]>,
    ) -> ServiceResult<Value> {
        let level = level.unwrap_or(0.95);
        let report = self.core_report(name, level, Validity::Anytime, rows)?;
        let e = self.experiment(name)?;
        Ok(json!({
            "experiment": name,
            "kind": report.kind,
            "closed": e.closed.is_some(),
            "decisions": e.session.issued(),
            "pending": e.session.pending(),
            "report": report,
            "ledger": self.ledger_summary(name)?,
            "cost": "none: post-processing of released statistics and public counts",
        }))
    }

    /// The trial monitor's numbers (admin; [`crate::monitor_html`] draws them): enrolment over
    /// time, allocation, the interim look, the ledger against the guarantee, the audit head and
    /// the verification state.
    ///
    /// # Errors
    /// No such experiment.
    pub fn monitor(&self, name: &str) -> ServiceResult<Value> {
        let counts = self.store.outcome_counts(name)?;
        let interim = self.interim_of(name, Some(0.95), Some(&counts))?;
        let e = self.experiment(name)?;
        let setting = e.session.setting();
        let r = &interim["report"];
        let (unit, labels): (&str, Vec<String>) = match setting {
            Setting::Contextual => ("position in the action set", Vec::new()),
            _ => ("arm", (0..e.arms).map(|a| format!("arm {a}")).collect()),
        };
        let allocation: Vec<Value> = counts
            .iter()
            .map(|(arm, [obs, imp, late, pending])| {
                json!({"label": labels.get(*arm).cloned().unwrap_or(format!("#{arm}")),
                       "decisions": obs + imp + pending, "observed": obs, "imputed": imp,
                       "late": late, "pending": pending})
            })
            .collect();
        let mut estimates: Vec<Value> = Vec::new();
        if let Some(list) = r["estimates"].as_array() {
            for (arm, est) in list.iter().enumerate() {
                if est.is_object() {
                    let mut x = est.clone();
                    x["label"] = json!(format!("arm {arm}"));
                    estimates.push(x);
                }
            }
        }
        if let Some(values) = r["linear"]["values"].as_array() {
            for (i, v) in values.iter().enumerate() {
                let mut x = v.clone();
                x["label"] = json!(format!("action {}", i + 1));
                estimates.push(x);
            }
        }
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for x in &estimates {
            if let (Some(l), Some(h)) = (x["low"].as_f64(), x["high"].as_f64()) {
                lo = lo.min(l);
                hi = hi.max(h);
            }
        }
        let range = if lo.is_finite() && hi.is_finite() && hi > lo {
            json!([lo, hi])
        } else {
            json!([0.0, 1.0])
        };
        let ledger = &interim["ledger"];
        let (seq, head) = self.store.audit_head()?;
        let g = serde_json::to_value(&e.guarantee).unwrap_or(Value::Null);
        Ok(json!({
            "experiment": name,
            "kind": interim["kind"],
            "setting": format!("{setting:?}").to_lowercase(),
            "status": if e.closed.is_some() { "closed" } else { "running" },
            "now": store::now(),
            "decisions": e.session.issued(),
            "pending": e.session.pending(),
            "enrolment": self.store.enrolment(name, 200)?,
            "allocation_unit": unit,
            "allocation": allocation,
            "interim": {
                "level": r["level"], "method": r["method"],
                "range": range,
                "estimates": if estimates.is_empty() { Value::Null } else { json!(estimates) },
                "why_none": r["why_no_estimates"].as_str().unwrap_or("no release yet"),
            },
            "ledger": {
                "charged_total": ledger["charged_total"], "charges": ledger["charges"],
                "releases": ledger["releases"],
                "max_charges_per_release": ledger["max_charges_per_release"],
                "measure": ledger["effective_budget"]["measure"],
                "declared": g["budget"][ledger["effective_budget"]["measure"].as_str().unwrap_or("")],
                "effective": ledger["effective_budget"]["value"],
                "guarantee": g["notion"],
            },
            "audit": {"entries": seq, "head": head},
            "verification": crate::verify::startup_state(),
        }))
    }
}
