//! Fixed-confidence BAI: fast path vs a naive step-by-step simulator, privacy mechanics, error
//! rates, bad input.

use dpbandits::bai::PRIVATE_FORCING_SCALE;
use dpbandits::bai::w_eps;
use dpbandits::bai::{
    AdapTtConfig, BaiConfig, BaiInstance, BernoulliArms, DpTtConfig, EbTciConfig, ThresholdKind,
    run_one, simulate_bai,
};
use dpbandits::bai::{JointArm, joint_level, joint_threshold};
use dpbandits::experiment::Plan;
use dpbandits::math::stats::clopper_pearson_upper;
use dpbandits::math::stats::{Summary, ks_critical, ks_statistic};
use dpbandits::privacy::LaplaceMechanism;
use dpbandits::rng::{SimRng, Stream, stream_rng};
use rand::{RngExt, SeedableRng};
use rand_distr::{Binomial, Distribution};

/// A literal, step-by-step DP-TT (eta = 1, default threshold `joint`, default forcing) written
/// independently of the engine: one Bernoulli reward per round accumulated in the raw phase sum
/// `P_a`, phase switch when `N_a >= 2^k_a`, the stopping rule evaluated **every round**, the
/// challenger every round, per-round forced exploration and tracking. Returns (tau, correct).
fn naive_dp_tt(means: &[f64], eps: f64, delta: f64, seed: u64) -> (u64, bool) {
    let k = means.len();
    let best = (0..k).fold(0, |b, a| if means[a] > means[b] { a } else { b });
    let mut env = stream_rng(seed, Stream::Env, &[]);
    let mut prng = stream_rng(seed, Stream::Policy, &[]);
    let mut nrng = stream_rng(seed, Stream::Noise, &[]);
    let lap = LaplaceMechanism::for_pure_dp(1.0, eps).unwrap();
    let rho = eps * lap.scale();
    let c = |ka: u64, na: u64, kb: u64, nb: u64| {
        let arm = |j: u64, n: u64| JointArm {
            j,
            n: n as f64,
            draws: j,
        };
        joint_threshold(arm(ka, na), arm(kb, nb), eps, rho, k, delta)
    };
    let (mut n, mut kk, mut nt) = (vec![0u64; k], vec![0u64; k], vec![0u64; k]);
    let (mut s, mut p) = (vec![0.0f64; k], vec![0.0f64; k]);
    let (mut ll, mut nl) = (vec![0u64; k], vec![0u64; k]);
    let mut pull = |a: usize, p: &mut Vec<f64>, n: &mut Vec<u64>| {
        let x: f64 = env.random();
        p[a] += if x < means[a] { 1.0 } else { 0.0 };
        n[a] += 1;
    };
    for a in 0..k {
        pull(a, &mut p, &mut n);
        s[a] = lap.release(p[a], &mut nrng);
        p[a] = 0.0;
        kk[a] = 1;
        nt[a] = 1;
    }
    let m = |s: &[f64], nt: &[u64], a: usize| (s[a] / nt[a] as f64).clamp(0.0, 1.0);
    let recommend = |s: &[f64], nt: &[u64], prng: &mut SimRng| {
        let best = (0..k)
            .map(|a| m(s, nt, a))
            .fold(f64::NEG_INFINITY, f64::max);
        let ties: Vec<usize> = (0..k).filter(|&a| m(s, nt, a) == best).collect();
        ties[prng.random_range(0..ties.len())]
    };
    let mut rec = recommend(&s, &nt, &mut prng);
    let mut t = k as u64;
    loop {
        // Phase switches (raw data touched only here).
        let mut switched = false;
        for a in 0..k {
            while n[a] >= 1u64 << kk[a] {
                kk[a] += 1;
                s[a] += lap.release(p[a], &mut nrng);
                p[a] = 0.0;
                nt[a] = n[a];
                switched = true;
            }
        }
        if switched {
            rec = recommend(&s, &nt, &mut prng);
        }
        let stop = (0..k).filter(|&a| a != rec).all(|a| {
            w_eps(
                m(&s, &nt, rec),
                m(&s, &nt, a),
                nt[rec] as f64,
                nt[a] as f64,
                eps,
            ) > c(kk[rec], nt[rec], kk[a], nt[a])
        });
        if stop {
            return (t, rec == best);
        }
        // Forced exploration (default of the engine): N_a < sqrt(16 t / min(1, eps)) - K/2.
        let u = (0..k).fold(0, |x, a| if n[a] < n[x] { a } else { x });
        if (n[u] as f64) < (PRIVATE_FORCING_SCALE * t as f64 / eps.min(1.0)).sqrt() - k as f64 / 2.0
        {
            pull(u, &mut p, &mut n);
            t += 1;
            continue;
        }
        let b = rec;
        let ch = (0..k)
            .filter(|&a| a != b)
            .map(|a| {
                let v = w_eps(m(&s, &nt, b), m(&s, &nt, a), n[b] as f64, n[a] as f64, eps)
                    + (n[a] as f64).ln();
                (v, a)
            })
            .fold(
                (f64::INFINITY, usize::MAX),
                |x, y| if y.0 < x.0 { y } else { x },
            )
            .1;
        let arm = if (nl[b] as f64) <= 0.5 * (ll[b] + 1) as f64 {
            b
        } else {
            ch
        };
        ll[b] += 1;
        if arm == b {
            nl[b] += 1;
        }
        pull(arm, &mut p, &mut n);
        t += 1;
    }
}

fn engine_taus(
    cfg: &dyn BaiConfig,
    inst: &BaiInstance,
    delta: f64,
    runs: u64,
    tag: &str,
) -> Vec<f64> {
    let eng = cfg.prepare(inst.k(), delta).unwrap();
    (0..runs)
        .map(|r| run_one(&eng, inst, 99, tag, r, u64::MAX).unwrap().tau as f64)
        .collect()
}

/// The engine (Binomial sums per request held until the release, stopping only after releases,
/// closed-form tracking, theta = 0) against the naive simulator: two-sample KS test on 300 + 300 stopping times at
/// level 1e-4 (false-failure rate 1e-4 if the distributions are equal). It fails if, e.g., the
/// Binomial batching used the wrong count or the stopping check after releases missed stops.
#[test]
fn fast_path_matches_naive_step_by_step() {
    let means = [0.9, 0.6, 0.3];
    let inst = BaiInstance::new(means.to_vec()).unwrap();
    for &eps in &[1.0, 10.0] {
        let naive: Vec<f64> = (0..300)
            .map(|r| naive_dp_tt(&means, eps, 0.1, 1000 + r).0 as f64)
            .collect();
        let fast = engine_taus(&DpTtConfig::new(eps), &inst, 0.1, 300, "fast");
        let d = ks_statistic(&naive, &fast);
        let crit = ks_critical(300, 300, 1e-4);
        let mn = naive.iter().sum::<f64>() / 300.0;
        let mf = fast.iter().sum::<f64>() / 300.0;
        assert!(
            d < crit,
            "eps {eps}: KS {d} >= {crit} (naive mean {mn}, fast mean {mf})"
        );
    }
}

/// Lazy challenger (theta = 0.01, used by the experiments) vs theta = 0.
/// * With light forcing (`forcing_scale = 1`): KS test (300 + 300) at level 1e-4 (false-failure
///   rate 1e-4 if equal); the variant must not change the stopping-time law detectably.
/// * With the default forcing (`c = 16`) the stopping times sit on a few atoms (release times of
///   forced arms) and a lazy block of `theta t` rounds can move a release by up to that block, so
///   the law moves by about 1% and KS sees it. There we check the means agree within
///   `2 theta` relative plus 4 standard errors of the difference (measured: 0.8%).
#[test]
fn lazy_challenger_matches_exact() {
    let inst = BaiInstance::new(vec![0.9, 0.6, 0.3]).unwrap();
    for &eps in &[0.1, 2.0] {
        for &c in &[1.0, PRIVATE_FORCING_SCALE] {
            let mut e = DpTtConfig::new(eps);
            e.forcing_scale = c;
            let exact = engine_taus(&e, &inst, 0.1, 300, "a");
            let mut l = e;
            l.lazy = 0.01;
            let lazy = engine_taus(&l, &inst, 0.1, 300, "b");
            if c == 1.0 {
                let d = ks_statistic(&exact, &lazy);
                assert!(d < ks_critical(300, 300, 1e-4), "eps {eps}: KS {d}");
            }
            let (e, l) = (
                Summary::of(&mut exact.clone()),
                Summary::of(&mut lazy.clone()),
            );
            let (me, ml) = (e.mean, l.mean);
            let tol = 0.02 * me + 4.0 * e.sem.hypot(l.sem);
            assert!(
                (me - ml).abs() <= tol,
                "eps {eps} c {c}: exact {me}, lazy {ml}, tol {tol}"
            );
        }
    }
}

/// Privacy mechanics (spec §6.3): one Laplace draw per release, released counts on the doubling
/// grid, at most K (1 + log2 tau) draws in total.
#[test]
fn privacy_mechanics() {
    let inst = BaiInstance::new(vec![0.95, 0.9, 0.9, 0.9, 0.5]).unwrap();
    let eng = DpTtConfig::new(0.5).prepare(5, 0.01).unwrap();
    for r in 0..20 {
        let o = run_one(&eng, &inst, 3, "pm", r, u64::MAX).unwrap();
        assert_eq!(o.noise_draws, o.releases.iter().sum::<u64>());
        for a in 0..5 {
            // k releases happen at counts 1, 2, ..., 2^(k-1) <= N_a < 2^k.
            let k = o.releases[a];
            assert!(
                o.pulls[a] >= 1u64 << (k - 1) && o.pulls[a] < 1u64 << k,
                "{o:?}"
            );
        }
        assert!(o.noise_draws as f64 <= 5.0 * (1.0 + (o.tau as f64).log2()));
        assert_eq!(o.pulls.iter().sum::<u64>(), o.tau);
    }
    // Non-private EB-TCI draws no noise; the guarantee says so.
    let e = EbTciConfig::default();
    let o = run_one(&e.prepare(5, 0.01).unwrap(), &inst, 3, "np", 0, u64::MAX).unwrap();
    assert_eq!(o.noise_draws, 0);
    assert!(!e.guarantee().is_private());
    assert!(
        DpTtConfig::new(0.5)
            .guarantee()
            .summary()
            .contains("epsilon = 0.5")
    );
}

/// Deterministic for a seed; the cap is reported (the truncated request ends the run at exactly
/// `max_samples`).
#[test]
fn reproducible_and_capped() {
    let inst = BaiInstance::new(vec![0.75, 0.7, 0.7]).unwrap();
    let eng = DpTtConfig::new(0.01).prepare(3, 0.01).unwrap();
    let once = |cap: u64| {
        let mut env = BernoulliArms::new(&inst, 1);
        let mut alg = eng.clone().start(2);
        simulate_bai(&mut env, alg.as_mut(), cap).unwrap()
    };
    assert_eq!(once(u64::MAX), once(u64::MAX));
    let o = once(1000);
    assert!(o.capped && o.tau == 1000, "{o:?}");
    assert_eq!(o.pulls.iter().sum::<u64>(), 1000);
}

/// Error rate <= delta for DP-TT (threshold R) and AdaP-TT (thesis thresholds) on both instances
/// at several eps, delta = 0.1, 150 runs each (lazy = 0.01). Test: errors <= 35, where
/// P(Bin(150, 0.1) > 35) = 5.5e-7, so a delta-correct algorithm fails with probability < 1e-6 per
/// configuration (< 2e-5 over the 16 configurations). The 1000-run delta = 0.01 results are in
/// docs/bai.md.
#[test]
fn error_rate_below_delta() {
    let insts = [
        vec![0.95, 0.9, 0.9, 0.9, 0.5],
        vec![0.75, 0.7, 0.7, 0.7, 0.7],
    ];
    let mut worst = 0;
    for means in &insts {
        let inst = BaiInstance::new(means.clone()).unwrap();
        for &eps in &[0.3, 1.0, 10.0, 100.0] {
            let mut d = DpTtConfig::new(eps);
            d.lazy = 0.01;
            let mut a = AdapTtConfig::new(eps, false);
            a.lazy = 0.01;
            for cfg in [&d as &dyn BaiConfig, &a] {
                let eng = cfg.prepare(5, 0.1).unwrap();
                let mut errors = 0;
                for r in 0..150 {
                    let o = run_one(&eng, &inst, 11, &cfg.label(), r, 1 << 40).unwrap();
                    assert!(!o.capped);
                    errors += u32::from(!o.correct);
                }
                worst = worst.max(errors);
                assert!(errors <= 35, "{}: {errors} errors in 150 runs", cfg.label());
            }
        }
    }
    // Sanity of the margin: even 35 errors would not exclude delta = 0.1 at level 1e-6.
    assert!(clopper_pearson_upper(35, 150, 1e-6) > 0.1);
    eprintln!("worst error count {worst}/150");
}

/// Issue 43: the authors' thresholds `paper` (`dp_c`) and `heuristic` (`emp_c`) for DP-TT and
/// AdaP-TT: accepted, named in the label and the cell facts (with the delta-correctness note),
/// not claimed as proved; AdaP-TT's `heuristic` runs exactly as `code23` (same formula, same
/// `sigma = 1` cost); the defaults' labels and facts are unchanged; every run stops.
#[test]
fn authors_thresholds_are_wired() {
    let d = DpTtConfig::new(1.0);
    let a = AdapTtConfig::new(1.0, false);
    assert_eq!(
        d.label(),
        "dp_tt(eps=1,threshold=joint,eta=1,beta=0.5,lazy=0,fe=privacy_scaled*16)"
    );
    assert_eq!(d.describe(), serde_json::json!({ "lazy_challenger": 0.0 }));
    assert_eq!(a.describe(), serde_json::json!({ "lazy_challenger": 0.0 }));
    let inst = BaiInstance::new(vec![0.7, 0.5, 0.3]).unwrap();
    for t in [ThresholdKind::Paper, ThresholdKind::Heuristic] {
        let mut d = DpTtConfig::new(1.0);
        d.threshold = t;
        let mut a = AdapTtConfig::new(1.0, false);
        a.threshold = t;
        for cfg in [&d as &dyn BaiConfig, &a] {
            assert!(cfg.label().contains(&format!("threshold={}", t.name())));
            assert!(!cfg.threshold_proved());
            let note = cfg.describe()["threshold_note"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(note.contains("adapTT.py"), "{note}");
            let eng = cfg.prepare(3, 0.1).unwrap();
            for r in 0..20 {
                let o = run_one(&eng, &inst, 5, &cfg.label(), r, 1 << 40).unwrap();
                assert!(!o.capped, "{}", cfg.label());
            }
        }
        assert!(
            ThresholdKind::Paper
                .note()
                .unwrap()
                .contains("authors' claim")
        );
        assert!(
            ThresholdKind::Heuristic
                .note()
                .unwrap()
                .contains("not delta-correct")
        );
    }
    // AdaP-TT `heuristic` is `code23` under another name: same runs for the same seeds.
    let mut h = AdapTtConfig::new(0.5, false);
    h.threshold = ThresholdKind::Heuristic;
    let mut c = AdapTtConfig::new(0.5, false);
    c.threshold = ThresholdKind::Code23;
    let (eh, ec) = (h.prepare(3, 0.1).unwrap(), c.prepare(3, 0.1).unwrap());
    for r in 0..10 {
        let oh = run_one(&eh, &inst, 9, "same", r, 1 << 40).unwrap();
        let oc = run_one(&ec, &inst, 9, "same", r, 1 << 40).unwrap();
        assert_eq!((oh.tau, oh.correct), (oc.tau, oc.correct));
    }
}

/// Proposal J bounds the null (spec §3.5.2 (a)): for two arms with **equal** true means (the
/// hardest case for a wrong stop), fixed release indices and counts on the eta = 1 grid, the
/// DP-TT statistic `W_eps(m_a, m_b; N~_a, N~_b)` exceeds `C(j_a, j_b)` with probability at most
/// the per-pair level `delta'` (`delta = 0.9`, `K = 2`, so `delta'` is 0.07%-2% and measurable).
/// 40 000 draws per case; the check `count <= delta' n + 5 sd + 1` fails a correct bound with
/// probability < 1e-6 per case. Power: in the three high-privacy cases (the `C^TV` branch,
/// measured 446-1097 of 40 000) the same draws exceed `C / 2` far more often than `delta'`
/// allows, so a threshold too small by 2x there (e.g. a wrong noise scale) would be caught; in
/// the KL regime the bound is conservative and `W` never reaches `C / 2`.
#[test]
fn joint_threshold_bounds_the_null() {
    let (k, delta, draws) = (2usize, 0.9, 40_000u64);
    let mut env = stream_rng(5, Stream::Env, &[]);
    let mut nrng = stream_rng(5, Stream::Noise, &[]);
    // (eps, j_a, j_b, mu): indices large enough that eps N~ makes the threshold reachable.
    let mut powered = 0;
    let cases = [
        (0.01, 12u64, 12u64, 0.5),
        (0.01, 12, 14, 0.3),
        (0.3, 6, 6, 0.5),
        (0.3, 7, 9, 0.8),
        (3.0, 3, 3, 0.5),
        (3.0, 4, 6, 0.3),
        (100.0, 3, 3, 0.5),
        (100.0, 6, 4, 0.8),
    ];
    for &(eps, ja, jb, mu) in &cases {
        let lap = LaplaceMechanism::for_pure_dp(1.0, eps).unwrap();
        let rho = eps * lap.scale();
        let (na, nb) = (1u64 << (ja - 1), 1u64 << (jb - 1));
        let arm = |j: u64, n: u64| JointArm {
            j,
            n: n as f64,
            draws: j,
        };
        let c = joint_threshold(arm(ja, na), arm(jb, nb), eps, rho, k, delta);
        let level = joint_level(ja, jb, k, delta);
        let mut mean = |n: u64, j: u64| {
            let s = Binomial::new(n, mu).unwrap().sample(&mut env) as f64;
            let noise: f64 = (0..j).map(|_| lap.release(0.0, &mut nrng)).sum();
            ((s + noise) / n as f64).clamp(0.0, 1.0)
        };
        let (mut over, mut over_half) = (0u64, 0u64);
        for _ in 0..draws {
            let (ma, mb) = (mean(na, ja), mean(nb, jb));
            let w = w_eps(ma, mb, na as f64, nb as f64, eps);
            over += u64::from(w > c);
            over_half += u64::from(w > 0.5 * c);
        }
        let n = draws as f64;
        let allowed = level * n + 5.0 * (level * (1.0 - level) * n).sqrt() + 1.0;
        assert!(
            (over as f64) <= allowed,
            "eps {eps} ({ja},{jb}): {over} > {allowed} (C = {c}, delta' = {level})"
        );
        eprintln!(
            "eps {eps} ({ja},{jb}): C = {c:.2}, delta' = {level:.4}, over C: {over}, over C/2: {over_half}"
        );
        powered += usize::from(over_half as f64 > allowed);
    }
    assert!(powered >= 3, "only {powered} of 8 cases see C/2 exceeded");
}

/// Item 3 of the issue at CI scale: with the delta-correct thresholds of each algorithm (DP-TT
/// `joint`, AdaP-TT thesis) and the same forced exploration, DP-TT needs fewer samples than
/// AdaP-TT on mu1 at high, medium and low privacy (100 runs each, delta = 0.01, lazy = 0.01).
/// The full 1000-run, 16-eps experiment is in docs/bai.md. Measured here: ratios 0.56 (eps =
/// 0.0215), 0.23 (0.1), 0.08 (1), with the difference 27, 110 and 88 standard errors; the test
/// asks for mean(DP-TT) + 4 se < mean(AdaP-TT) - 4 se, so with the measured effect sizes a
/// correct implementation fails it with negligible probability (CLT: < 1e-20 per point).
#[test]
fn dp_tt_needs_fewer_samples_than_adap_tt() {
    let inst = BaiInstance::new(vec![0.95, 0.9, 0.9, 0.9, 0.5]).unwrap();
    let stats = |cfg: &dyn BaiConfig| {
        let eng = cfg.prepare(5, 0.01).unwrap();
        let mut taus: Vec<f64> = (0..100)
            .map(|r| {
                let o = run_one(&eng, &inst, 21, &cfg.label(), r, 1 << 40).unwrap();
                assert!(!o.capped && o.correct, "{}: {o:?}", cfg.label());
                o.tau as f64
            })
            .collect();
        let s = Summary::of(&mut taus);
        (s.mean, s.sem)
    };
    for &eps in &[0.0215, 0.1, 1.0] {
        let mut d = DpTtConfig::new(eps);
        d.lazy = 0.01;
        let mut a = AdapTtConfig::new(eps, false);
        a.lazy = 0.01;
        let (md, sd) = stats(&d);
        let (ma, sa) = stats(&a);
        eprintln!("eps {eps}: DP-TT {md:.0} +- {sd:.0}, AdaP-TT {ma:.0} +- {sa:.0}");
        assert!(
            md + 4.0 * sd < ma - 4.0 * sa,
            "eps {eps}: DP-TT {md} +- {sd} vs AdaP-TT {ma} +- {sa}"
        );
    }
}

#[test]
fn bad_input_is_named() {
    let base = r#"
name = "x"
master_seed = 1
runs = 2
horizon = 1_000_000
[env]
kind = "bai_bernoulli"
delta = 0.01
means = [0.9, 0.5]
[[policy]]
kind = "dp_tt"
epsilon = [1.0]
"#;
    assert!(Plan::from_toml(base).is_ok());
    let cases = [
        ("means = [0.9, 0.5]", "means = [0.9, 1.0]", "means[1] = 1"),
        (
            "means = [0.9, 0.5]",
            "means = [0.9, 0.9]",
            "unique best arm",
        ),
        (
            "means = [0.9, 0.5]",
            "means = [0.9, -0.1]",
            "means[1] = -0.1",
        ),
        ("epsilon = [1.0]", "epsilon = [0.0]", "epsilon = 0"),
        ("epsilon = [1.0]", "epsilon = [nan]", "epsilon = NaN"),
        ("epsilon = [1.0]", "", "epsilon = (missing)"),
        ("delta = 0.01", "delta = 1.0", "delta = 1"),
        ("delta = 0.01", "delta = 0.0", "delta = 0"),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nthreshold = \"eb\"",
            "threshold = \"eb\"",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\neta = -1.0",
            "eta = -1",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nbeta = 1.5",
            "beta = 1.5",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"ucb1\"",
            "policy[0].kind = \"ucb1\": a finite-armed kind, but the environment \"bai_bernoulli\" is best-arm identification",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nforced_exploration = \"often\"",
            "forced_exploration = \"often\"",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nforcing_scale = -2.0",
            "forcing_scale = -2",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"adap_tt\"\nthreshold = \"joint\"",
            "threshold = \"joint\"",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_se_bai\"\nthreshold = \"joint\"",
            "unknown field `threshold`",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"adap_tt_star\"\nthreshold = \"paper\"",
            "threshold = \"paper\": expected one of: thesis",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nthreshold = \"code23\"",
            "threshold = \"code23\": expected one of: joint, r, h_half, h_arm, paper, heuristic",
        ),
        (
            "kind = \"dp_tt\"",
            "kind = \"dp_tt\"\nthreshold = \"papers\"",
            "`paper`, `heuristic`",
        ),
    ];
    for (from, to, want) in cases {
        let e = Plan::from_toml(&base.replace(from, to))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    let mut d = DpTtConfig::new(1.0);
    d.threshold = ThresholdKind::Thesis;
    assert!(d.validate().is_err());
    assert!(SimRng::seed_from_u64(0).random::<u64>() != 0);
}
