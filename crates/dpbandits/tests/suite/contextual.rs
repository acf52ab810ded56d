//! Contextual linear bandits: OFUL / RS-OFUL / AdaC-OFUL (spec zcdp §4, §8 T1, T4, T9, T10),
//! the grouped common-random-numbers runner, and bad feature files.

use dpbandits::contextual::{
    ActionSet, ContextualEnvConfig, ContextualEnvironment, ContextualGaussianConfig,
    ContextualPolicy, ContextualPolicyConfig, FeatureTable, OfulConfig, OfulKind, OfulPolicy,
    PrivacyMode,
};
use dpbandits::experiment::{self, Plan};
use dpbandits::privacy::GaussianMechanism;

fn paper_env(unit_ball: bool) -> ContextualGaussianConfig {
    let mut c = ContextualGaussianConfig::paper();
    c.unit_ball = unit_ball;
    c.instantiate(20240917).unwrap();
    c
}

/// Play `p` for `horizon` rounds; `each` is called before every choice with (t, policy).
fn play<const D: usize>(
    env: &mut dyn ContextualEnvironment,
    p: &mut OfulPolicy<D>,
    horizon: u64,
    mut each: impl FnMut(u64, &OfulPolicy<D>, &OfulPolicy<D>),
) -> f64
where
    OfulPolicy<D>: ContextualPolicy + Clone,
{
    let mut regret = 0.0;
    for t in 0..horizon {
        env.next_round(t);
        let before = p.clone();
        let acts = env.actions();
        let i = p.choose(t, &acts);
        each(t, &before, p);
        regret += env.best_mean() - env.means()[i];
        let r = env.reward(i);
        p.observe(&acts, i, r).unwrap();
    }
    regret
}

/// spec §4.3 [P App. F-A step 5]: l(t) <= d/ln(1+C) ln(1 + t L^2/(lambda d)).
fn update_bound(t: f64, d: f64, lambda: f64, c: f64, l: f64) -> f64 {
    d / (1.0 + c).ln() * (1.0 + t * l * l / (lambda * d)).ln()
}

/// spec §8 T9: the number of episodes grows as O(d log T): below 35.11 at t = 1e3 and 55.04 at
/// t = 1e5 (d = 3, lambda = 0.1, C = 1, ||a|| <= 1); every update multiplies det V by more than
/// 1 + C; inside an episode det V_{t-1} <= (1 + C) det V_tau. Deterministic (fixed seeds).
#[test]
fn episodes_grow_logarithmically_with_determinant_doubling() {
    assert!((update_bound(1e3, 3.0, 0.1, 1.0, 1.0) - 35.11).abs() < 0.01);
    assert!((update_bound(1e5, 3.0, 0.1, 1.0, 1.0) - 55.04).abs() < 0.01);
    for kind in [OfulKind::RsOful, OfulKind::AdacOful] {
        let env_cfg = paper_env(true);
        let mut env = env_cfg.build(20240917, 3).unwrap();
        let rho = if kind == OfulKind::AdacOful {
            0.5
        } else {
            f64::INFINITY
        };
        let mut p = OfulPolicy::<3>::new(OfulConfig::paper(kind, rho), 100_000, 11).unwrap();
        let mut at = vec![];
        play(env.as_mut(), &mut p, 100_000, |t, before, after| {
            if after.updates() > before.updates() {
                assert_eq!(after.updates(), before.updates() + 1);
                assert!(
                    after.det_tau() > 2.0 * before.det_tau(),
                    "t={t}: det V_tau {} <= (1+C) det V_prev {}",
                    after.det_tau(),
                    before.det_tau()
                );
            } else {
                assert!(after.det_v() <= 2.0 * after.det_tau() * (1.0 + 1e-12));
            }
            if t + 1 == 1000 || t + 1 == 100_000 {
                at.push(after.updates());
            }
        });
        eprintln!("{kind:?}: {} updates by t=1e3, {} by t=1e5", at[0], at[1]);
        assert!(
            (at[0] as f64) < 35.11,
            "{kind:?}: {} updates by t=1e3",
            at[0]
        );
        assert!(
            (at[1] as f64) < 55.04,
            "{kind:?}: {} updates by t=1e5",
            at[1]
        );
        // O(d log T): the count keeps growing, by about d/ln(1+C) per factor e of t.
        assert!(at[1] > at[0]);
    }
    // Unprojected Gaussian contexts: the same bound with L = the largest action norm seen.
    let env_cfg = paper_env(false);
    let mut env = env_cfg.build(20240917, 4).unwrap();
    let mut p = OfulPolicy::<3>::new(
        OfulConfig::paper(OfulKind::RsOful, f64::INFINITY),
        20_000,
        1,
    )
    .unwrap();
    let mut max_norm = 0.0f64;
    play(env.as_mut(), &mut p, 20_000, |t, _, after| {
        let _ = t;
        let _ = after;
    });
    let mut env2 = env_cfg.build(20240917, 4).unwrap();
    for t in 0..20_000 {
        env2.next_round(t);
        let a = env2.actions();
        for i in 0..a.k {
            max_norm = max_norm.max(a.action(i).iter().map(|x| x * x).sum::<f64>().sqrt());
        }
    }
    assert!((p.updates() as f64) < update_bound(2e4, 3.0, 0.1, 1.0, max_norm));
}

/// spec §8 T10: AdaC-OFUL with rho = inf is RS-OFUL: same actions, bit-identical regret, on the
/// same streams; a large finite rho is close to it. Deterministic (fixed seeds).
#[test]
fn adac_oful_with_infinite_rho_is_rs_oful() {
    let env_cfg = paper_env(false);
    let mut e1 = env_cfg.build(99, 0).unwrap();
    let mut e2 = env_cfg.build(99, 0).unwrap();
    let mut rs = OfulPolicy::<3>::new(
        OfulConfig::paper(OfulKind::RsOful, f64::INFINITY),
        30_000,
        1,
    )
    .unwrap();
    let mut ad = OfulPolicy::<3>::new(
        OfulConfig::paper(OfulKind::AdacOful, f64::INFINITY),
        30_000,
        2,
    )
    .unwrap();
    for t in 0..30_000 {
        e1.next_round(t);
        e2.next_round(t);
        let (a1, a2) = (e1.actions(), e2.actions());
        let (i1, i2) = (rs.choose(t, &a1), ad.choose(t, &a2));
        assert_eq!(i1, i2, "round {t}");
        rs.observe(&a1, i1, e1.reward(i1)).unwrap();
        ad.observe(&a2, i2, e2.reward(i2)).unwrap();
    }
    assert_eq!(rs.theta(), ad.theta());
    assert_eq!(rs.updates(), ad.updates());
    assert_eq!(ad.radius().1, 0.0);

    // Through the experiment planner (grouped runner): the gap column is exactly 0 for rho = inf,
    // and shrinks as rho grows.
    let text = r#"
        name = "t10"
        master_seed = 5
        horizon = 20000
        runs = 3
        [env]
        kind = "contextual_gaussian"
        [[policy]]
        kind = "rs_oful"
        [[policy]]
        kind = "adac_oful"
        mode = "reproduction"
        rho = [0.3, 1e6, inf]
    "#;
    let plan = Plan::from_toml(text).unwrap();
    let out = experiment::run(&plan, &|| {});
    let runs = |c: usize| out.cells[c].as_ref().unwrap().clone();
    let (base, small, big, inf) = (runs(0), runs(1), runs(2), runs(3));
    assert_eq!(base, inf, "rho = inf must reproduce rs_oful exactly");
    let last = base[0].len() - 1;
    let gap = |x: &Vec<Vec<f64>>| {
        x.iter()
            .zip(&base)
            .map(|(p, b)| p[last] - b[last])
            .sum::<f64>()
            / 3.0
    };
    assert!(
        gap(&big).abs() < 0.1 * gap(&small),
        "gap(rho=1e6) {} vs gap(rho=0.3) {}",
        gap(&big),
        gap(&small)
    );
}

/// spec §8 T1/T2: each release adds N(0, 2/rho) per coordinate (sensitivity 2), at loss <= rho.
/// T4: one Y per update, so after j updates the running sum carries N(0, (2j/rho) I).
/// Checked on 4000 seeds with zero rewards (the running sum is then exactly sum_j Y_j):
/// the variance ratio estimate has sd sqrt(2/4000) = 0.022, the tolerance 0.12 is 5.3 sd, and
/// the correlation tolerance 0.09 is 5.7 sd: false-failure rate < 1e-6 over the 3 + 3 checks.
#[test]
fn noise_calibration_and_cumulative_covariance() {
    for rho in [0.1, 0.5, 1.0, 10.0] {
        let p = OfulPolicy::<3>::new(OfulConfig::paper(OfulKind::AdacOful, rho), 1000, 1).unwrap();
        let m: GaussianMechanism = p.mechanism();
        assert!((m.variance() - 2.0 / rho).abs() <= 1e-12 * (2.0 / rho));
        assert!(m.zcdp_map(2.0) <= rho);
    }
    let rho = 0.5;
    let j = 5u64;
    let env_cfg = paper_env(true);
    let n = 4000;
    let mut sums: Vec<[f64; 3]> = vec![];
    for seed in 0..n {
        let mut env = env_cfg.build(1, seed).unwrap();
        let mut p =
            OfulPolicy::<3>::new(OfulConfig::paper(OfulKind::AdacOful, rho), 1000, seed).unwrap();
        let mut t = 0;
        while p.updates() < j {
            env.next_round(t);
            let a = env.actions();
            let i = p.choose(t, &a);
            if p.updates() == j {
                break;
            }
            p.observe(&a, i, 0.0).unwrap();
            t += 1;
        }
        let s = p.released_sum();
        sums.push([s[0], s[1], s[2]]);
    }
    let var = 2.0 * j as f64 / rho;
    for c in 0..3 {
        let v = sums.iter().map(|s| s[c] * s[c]).sum::<f64>() / n as f64;
        assert!((v / var - 1.0).abs() < 0.12, "coordinate {c}: {v} vs {var}");
    }
    for (a, b) in [(0, 1), (0, 2), (1, 2)] {
        let cov = sums.iter().map(|s| s[a] * s[b]).sum::<f64>() / n as f64;
        assert!((cov / var).abs() < 0.09, "cov({a},{b}) = {cov}");
    }
}

/// Abbasi-Yadkori et al. 2011, Thm 3: with ||a|| <= L, ||theta*|| <= S, <a, theta*> in [-1, 1],
/// R-sub-Gaussian noise and lambda >= max(1, L^2), w.p. >= 1 - delta
/// R_T <= 4 sqrt(T d ln(lambda + T L/d)) (sqrt(lambda) S + R sqrt(2 ln(1/delta) + d ln(1 + T L/(lambda d)))).
/// RS-OFUL: the same times sqrt(1 + C). Paper's instance projected on the unit ball (so L = 1),
/// lambda = 1, delta = 1e-5: each of the 5 runs fails with probability <= 1e-5 by the theorem,
/// false-failure rate <= 5e-5 per policy.
#[test]
fn oful_regret_below_its_theoretical_bound() {
    let (t_max, d, lambda, delta, s, l, r): (u64, f64, f64, f64, f64, f64, f64) =
        (20_000, 3.0, 1.0, 1e-5, 1.0, 1.0, 1.0);
    let tf = t_max as f64;
    let bound = 4.0
        * (tf * d * (lambda + tf * l / d).ln()).sqrt()
        * (lambda.sqrt() * s
            + r * (2.0 * (1.0 / delta).ln() + d * (1.0 + tf * l / (lambda * d)).ln()).sqrt());
    let env_cfg = paper_env(true);
    for (kind, factor) in [(OfulKind::Oful, 1.0), (OfulKind::RsOful, 2f64.sqrt())] {
        for run in 0..5 {
            let mut cfg = OfulConfig::paper(kind, f64::INFINITY);
            cfg.lambda = lambda;
            cfg.delta = delta;
            let mut p = OfulPolicy::<3>::new(cfg, t_max, run).unwrap();
            let mut env = env_cfg.build(3, run).unwrap();
            let reg = play(env.as_mut(), &mut p, t_max, |_, _, _| {});
            assert!(reg >= 0.0);
            assert!(
                reg < factor * bound,
                "{kind:?} run {run}: {reg} >= {}",
                factor * bound
            );
            // It also learns: far below linear regret.
            assert!(reg < 0.05 * tf, "{kind:?} run {run}: regret {reg}");
        }
    }
}

/// Guaranteed mode clips each contribution a r into the unit ball; reproduction mode does not and
/// says its guarantee is conditional.
#[test]
fn privacy_boundary_modes() {
    let acts = [2.0, 0.0, 0.0, 0.5, 0.0, 0.0];
    let a = ActionSet {
        d: 3,
        k: 2,
        features: &acts,
    };
    // One-action decision sets, so that the chosen action is the one we want to observe.
    let (s0, s1) = (
        ActionSet {
            d: 3,
            k: 1,
            features: &acts[..3],
        },
        ActionSet {
            d: 3,
            k: 1,
            features: &acts[3..],
        },
    );
    let play = |p: &mut OfulPolicy<3>, t: u64, set: &ActionSet<'_>, r: f64| {
        let i = p.choose(t, set);
        p.observe(set, i, r).unwrap();
    };
    let mut cfg = OfulConfig::paper(OfulKind::AdacOful, 1e9);
    let mut g = OfulPolicy::<3>::new(cfg.clone(), 100, 1).unwrap();
    play(&mut g, 0, &s0, 5.0);
    play(&mut g, 1, &s1, -3.0);
    cfg.mode = PrivacyMode::Reproduction;
    let mut rp = OfulPolicy::<3>::new(cfg.clone(), 100, 1).unwrap();
    play(&mut rp, 0, &s0, 5.0);
    play(&mut rp, 1, &s1, -3.0);
    let _ = g.choose(2, &a);
    let _ = rp.choose(2, &a);
    // The choice at t = 1 released the first episode (det grew by far more than 1 + C): the
    // contribution of a = (2, 0, 0) with r = 5. Guaranteed: 2 * (1/2) * clip(5) = 1;
    // reproduction: 2 * 5 = 10. (rho = 1e9: noise sd 4.5e-5.)
    assert!(
        (g.released_sum()[0] - 1.0).abs() < 1e-3,
        "{:?}",
        g.released_sum()
    );
    assert!(
        (rp.released_sum()[0] - 10.0).abs() < 1e-3,
        "{:?}",
        rp.released_sum()
    );
    assert!(g.guarantee().boundary.is_some());
    assert!(rp.guarantee().notion.starts_with("CONDITIONAL"));
    assert!(rp.guarantee().boundary.is_none());
    let np = OfulConfig::paper(OfulKind::RsOful, f64::INFINITY);
    assert!(!np.guarantee().is_private());
}

/// The grouped runner gives each cell exactly what it gets when run alone, and the results do
/// not depend on the thread count.
#[test]
fn grouped_runs_match_single_cells_and_thread_counts() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../experiments/smoke/contextual.toml"
    ))
    .unwrap();
    let plan = Plan::from_toml(&text).unwrap();
    let run_in = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| experiment::run(&plan, &|| {}))
    };
    let (one, two) = (run_in(1), run_in(2));
    let n_cp = plan.grid.points().len();
    for (c, cell) in plan.cells.iter().enumerate() {
        let a = one.cells[c].as_ref().unwrap();
        let b = two.cells[c].as_ref().unwrap();
        assert_eq!(a, b, "{}", cell.label());
        assert_eq!(a.len() as u64, plan.spec.runs);
        let mut alone = vec![0.0; n_cp];
        cell.run(2, &mut alone).unwrap();
        assert_eq!(
            alone,
            a[2],
            "{} run alone differs from the group",
            cell.label()
        );
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("dpb_ctx_{}_{name}", std::process::id()))
}

fn npy(shape: &str, descr: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend_from_slice(&(h.len() as u16).to_le_bytes());
    b.extend_from_slice(h.as_bytes());
    b.extend_from_slice(data);
    b
}

fn f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn plan_file(path: &std::path::Path) -> String {
    match Plan::from_toml(&format!(
        "name = 'f'\nmaster_seed = 1\nhorizon = 50\nruns = 2\n[env]\nkind = 'contextual_file'\npath = '{}'\n[[policy]]\nkind = 'rs_oful'\n",
        path.display()
    )) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

/// Feature files: good NPY (f8 and f4) and CSV load and run; bad ones give errors naming the
/// file, the field and the value.
#[test]
fn feature_files_and_bad_input() {
    // Good: 4 contexts x 3 actions x 2 features.
    let vals: Vec<f64> = (0..24).map(|i| (i as f64 * 0.37).sin()).collect();
    let p = tmp("good.npy");
    std::fs::write(&p, npy("(4, 3, 2)", "<f8", &f64s(&vals))).unwrap();
    let t = FeatureTable::load(&p).unwrap();
    assert_eq!((t.contexts(), t.max_actions(), t.dim()), (4, 3, 2));
    assert_eq!(t.actions(1).features, &vals[6..12]);
    assert_eq!(plan_file(&p), "");
    let p32 = tmp("good32.npy");
    let b32: Vec<u8> = vals
        .iter()
        .flat_map(|x| (*x as f32).to_le_bytes())
        .collect();
    std::fs::write(&p32, npy("(4, 3, 2)", "<f4", &b32)).unwrap();
    assert_eq!(FeatureTable::load(&p32).unwrap().contexts(), 4);
    let pc = tmp("good.csv");
    std::fs::write(
        &pc,
        "context,x,y\n0,1,0\n0,0,1\n1,0.5,0.5\n1,0.1,0.2\n1,0,0\n",
    )
    .unwrap();
    let t = FeatureTable::load(&pc).unwrap();
    assert_eq!((t.contexts(), t.max_actions()), (2, 3));
    // Run a tiny experiment on it.
    let plan = Plan::from_toml(&format!(
        "name = 'f'\nmaster_seed = 1\nhorizon = 300\nruns = 2\n[env]\nkind = 'contextual_file'\npath = '{}'\norder = 'sample'\ntheta = [0.6, 0.8]\n[[policy]]\nkind = 'rs_oful'\n[[policy]]\nkind = 'adac_oful'\nrho = 1.0\n",
        pc.display()
    ))
    .unwrap();
    let out = experiment::run(&plan, &|| {});
    assert!(out.cells.iter().all(|c| c.is_ok()));

    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        (
            "shape2d.npy",
            npy("(4, 6)", "<f8", &f64s(&vals)),
            vec!["shape", "(4, 6)", "(n_contexts, K, d)"],
        ),
        (
            "nan.npy",
            {
                let mut v = vals.clone();
                v[7] = f64::NAN;
                npy("(4, 3, 2)", "<f8", &f64s(&v))
            },
            vec!["context 1, action 0, feature 1", "NaN", "finite"],
        ),
        (
            "empty.npy",
            npy("(4, 0, 2)", "<f8", &[]),
            vec!["empty action set"],
        ),
        (
            "short.npy",
            npy("(4, 3, 2)", "<f8", &f64s(&vals[..20])),
            vec!["data", "160 bytes", "192 bytes"],
        ),
        (
            "int.npy",
            npy("(4, 3, 2)", "<i8", &f64s(&vals)),
            vec!["dtype", "'<i8'"],
        ),
        (
            "gap.csv",
            b"0,1,2\n0,3,4\n2,5,6\n".to_vec(),
            vec!["line 3", "context 1", "empty action set"],
        ),
        (
            "ragged.csv",
            b"0,1,2\n0,3\n".to_vec(),
            vec!["line 2", "1 features", "d = 2"],
        ),
        (
            "inf.csv",
            b"0,1,2\n1,inf,4\n".to_vec(),
            vec!["line 2, feature 0", "inf", "finite"],
        ),
        (
            "bad.txt",
            b"0,1\n".to_vec(),
            vec!["path", "bad.txt", ".npy"],
        ),
    ];
    for (name, bytes, needles) in cases {
        let p = tmp(name);
        std::fs::write(&p, bytes).unwrap();
        let e = plan_file(&p);
        assert!(
            e.contains(&p.display().to_string()) || name == "bad.txt",
            "{name}: {e}"
        );
        for n in needles {
            assert!(e.contains(n), "{name}: '{n}' not in: {e}");
        }
        let _ = std::fs::remove_file(&p);
    }
    let e = plan_file(&tmp("missing.npy"));
    assert!(
        e.contains("missing.npy") && e.contains("No such file"),
        "{e}"
    );

    // Config errors: theta of the wrong length, d too large, unknown key, policy of another setting.
    let base = "name = 'g'\nmaster_seed = 1\nhorizon = 50\nruns = 1\n";
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\ntheta = [1.0]\n[[policy]]\nkind = 'rs_oful'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("theta") && e.contains("d = 3"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\nd = 300\n[[policy]]\nkind = 'rs_oful'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("d = 300") && e.contains("1..=256"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\nk = 0\n[[policy]]\nkind = 'rs_oful'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("k = 0"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\n[[policy]]\nkind = 'ucb1'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("ucb1") && e.contains("contextual"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'bernoulli'\nmeans = [0.5]\n[[policy]]\nkind = 'rs_oful'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("rs_oful"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\n[[policy]]\nkind = 'rs_oful'\nrho = 1.0\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("rho = 1"), "{e}");
    let e = Plan::from_toml(&format!(
        "{base}[env]\nkind = 'contextual_gaussian'\n[[policy]]\nkind = 'adac_oful'\n"
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("rho") && e.contains("missing"), "{e}");
}
