use super::super::tests_support::private_kinds;
use super::*;
use crate::privacy::AuditMutant;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

#[test]
#[ignore]
fn explore_white_box() {
    let only = std::env::var("AUDIT_KIND").ok();
    for e in private_kinds() {
        if only.as_deref().is_some_and(|k| k != e.kind()) {
            continue;
        }
        let mut params: toml::Table = toml::from_str(e.info.example).unwrap();
        if let Ok(p) = std::env::var("AUDIT_PARAMS") {
            params.extend(
                super::super::parse_params(p.split(',').filter(|s| !s.is_empty())).unwrap(),
            );
        }
        let mutant = match std::env::var("AUDIT_MUTANT").as_deref() {
            Ok("resample") => Some(AuditMutant::ResampleReleases),
            Ok("forgetless") => Some(AuditMutant::ForgetlessReleases),
            Ok("two") => Some(AuditMutant::TwoEpisodeReleases),
            _ => None,
        };
        let opts = AuditOptions {
            noise_multiplier: env("AUDIT_M").unwrap_or(1.0),
            mutant,
            horizon: env("AUDIT_H"),
            confidence: env("AUDIT_CONF").unwrap_or(0.95),
            ..AuditOptions::default()
        };
        let w = WhiteBoxOptions {
            samples: env("AUDIT_SAMPLES").unwrap_or(20_000),
            targets: std::env::var("AUDIT_TARGETS").map_or(vec![], |s| {
                s.split(',').map(|x| x.parse().unwrap()).collect()
            }),
        };
        match audit_white_box(e.kind(), &params, &opts, &w) {
            Ok(r) => {
                print!("{}", r.table());
                if std::env::var("AUDIT_KEYS").is_ok() {
                    for t in &r.targets {
                        println!(
                            "  target {} ({:.1} releases/run, {} keys):",
                            t.target, t.releases_per_run, t.keys
                        );
                        for c in &t.carrying {
                            println!(
                                "    {} {} n={:?} {:.4} [{:.4}, {:.4}]",
                                c.key, c.family, c.n, c.estimate, c.lower, c.upper
                            );
                        }
                    }
                }
            }
            Err(err) => println!("{}: ERROR {err}", e.kind()),
        }
    }
}

/// The estimators on synthetic samples: the point estimates land near the truth and the
/// intervals cover it.
#[test]
fn estimators_are_calibrated() {
    use crate::rng::{Stream, stream_rng};
    use rand::RngExt;
    use rand_distr::{Distribution, StandardNormal};
    assert!((normal_quantile(0.975) - 1.959_963_985).abs() < 1e-8);
    assert!((normal_quantile(1e-6) + 4.753_424_309).abs() < 1e-7);
    assert!((chi2_quantile(0.5, 1000.0) - 999.333).abs() < 0.1);
    let mut rng = stream_rng(3, Stream::Noise, &[]);
    let n = 20_000;
    // Gaussian: sigma 2, shift 3: mu = 1.5
    let mut d: Vec<f64> = (0..n)
        .map(|_| {
            3.0 + 2.0 * {
                let z: f64 = StandardNormal.sample(&mut rng);
                z
            }
        })
        .collect();
    let mut d2: Vec<f64> = (0..n)
        .map(|_| {
            2.0 * {
                let z: f64 = StandardNormal.sample(&mut rng);
                z
            }
        })
        .collect();
    let (e, lo, hi) = estimate(Family::Gaussian, &mut d, &mut d2, 1e-3);
    assert!(
        lo < 1.5 && 1.5 < hi && (e - 1.5).abs() < 0.05,
        "{e} [{lo}, {hi}]"
    );
    // Laplace: b = 0.5, shift 1: epsilon = 2
    let lap = crate::privacy::LaplaceMechanism::with_scale(0.5).unwrap();
    let mut d: Vec<f64> = (0..n).map(|_| lap.release(1.0, &mut rng)).collect();
    let mut d2: Vec<f64> = (0..n).map(|_| lap.release(0.0, &mut rng)).collect();
    let (e, lo, hi) = estimate(Family::Laplace, &mut d, &mut d2, 1e-3);
    assert!(
        lo < 2.0 && 2.0 < hi && (e - 2.0).abs() < 0.1,
        "{e} [{lo}, {hi}]"
    );
    // Bits: randomized response at epsilon = 1
    let p = 1f64.exp() / (1.0 + 1f64.exp());
    let mut d: Vec<f64> = (0..n)
        .map(|_| f64::from(u8::from(rng.random::<f64>() < p)))
        .collect();
    let mut d2: Vec<f64> = (0..n)
        .map(|_| f64::from(u8::from(rng.random::<f64>() < 1.0 - p)))
        .collect();
    let (e, lo, hi) = estimate(Family::Bit, &mut d, &mut d2, 1e-3);
    assert!(
        lo < 1.0 && 1.0 < hi && (e - 1.0).abs() < 0.1,
        "{e} [{lo}, {hi}]"
    );
    // No shift: the interval reaches 0.
    let mut d: Vec<f64> = (0..n).map(|_| lap.release(0.0, &mut rng)).collect();
    let mut d2: Vec<f64> = (0..n).map(|_| lap.release(0.0, &mut rng)).collect();
    let (_, lo, _) = estimate(Family::Laplace, &mut d, &mut d2, 1e-3);
    assert_eq!(lo, 0.0);
}

/// The CI form's design: 2000 runs per table and target, the default horizon, targets and
/// seed.
fn ci(
    noise_multiplier: f64,
    mutant: Option<AuditMutant>,
    confidence: f64,
) -> (AuditOptions, WhiteBoxOptions) {
    (
        AuditOptions {
            noise_multiplier,
            mutant,
            confidence,
            ..AuditOptions::default()
        },
        WhiteBoxOptions {
            samples: 2000,
            targets: vec![],
        },
    )
}

fn white(kind: &str, params: &str, o: &(AuditOptions, WhiteBoxOptions)) -> WhiteBoxReport {
    let t: toml::Table = toml::from_str(params).unwrap();
    audit_white_box(kind, &t, &o.0, &o.1).unwrap()
}

/// CI: every private kind at its example parameters is `tight`: its composed loss is not above
/// the claim beyond the interval (no leak) and not below `0.9` of it beyond the interval (not
/// over-noised). 2000 runs per table and target, confidence 0.999. False-failure rate: every
/// interval of one audit holds with probability >= 0.999 (Bonferroni over targets and
/// releases; normal approximations of the median and of chi-square quantiles at >= 2000
/// samples), so a correct kind whose true ratio lies in [0.9, 1] fails with probability
/// <= 1e-3, and the 21 kinds with probability <= 2.1% (fixed seeds: the outcome is
/// deterministic). Also asserts that the point ratio is within [0.85, 1.15].
#[test]
fn white_box_is_tight_on_every_private_kind() {
    let kinds = private_kinds();
    assert!(kinds.len() >= 17, "{} private kinds", kinds.len());
    let o = ci(1.0, None, 0.999);
    for e in kinds {
        let r = white(e.kind(), e.info.example, &o);
        assert_eq!(r.verdict, WhiteVerdict::Tight, "{}", r.table());
        assert!((0.85..=1.15).contains(&r.ratio), "{}", r.table());
        // honest policies release each reward as often as their accounting says: once
        // (parallel composition), or in each p-sum of a tree that holds it
        let worst = r.targets.iter().find(|t| t.target == r.target).unwrap();
        assert_eq!(worst.carrying.len() as u64, worst.releases, "{}", r.table());
    }
}

/// The code mutants are caught as leaks (ratio above 1 beyond the interval, confidence 0.999)
/// on every kind that implements them, and the correct policy on the same design (samples,
/// horizon, targets, seed) is tight: `ResampleReleases` and `ForgetlessReleases` on AdaP-UCB,
/// AdaP-KLUCB and AdaC-UCB (ratios ~2-3 and ~5: the target enters that many releases),
/// `TwoEpisodeReleases` on AdaP-UCB and AdaP-KLUCB (ratio ~2: the factor-2 leak).
#[test]
fn white_box_catches_the_code_mutants() {
    for (m, kinds, at_least) in [
        (
            AuditMutant::ResampleReleases,
            &["adap_ucb", "adap_klucb", "adac_ucb"][..],
            1.5,
        ),
        (
            AuditMutant::ForgetlessReleases,
            &["adap_ucb", "adap_klucb", "adac_ucb"][..],
            3.0,
        ),
        (
            AuditMutant::TwoEpisodeReleases,
            &["adap_ucb", "adap_klucb"][..],
            1.5,
        ),
    ] {
        for &kind in kinds {
            let params = registry::policy(kind).unwrap().info.example;
            let h = white(kind, params, &ci(1.0, None, 0.999));
            assert_eq!(h.verdict, WhiteVerdict::Tight, "{}", h.table());
            let r = white(kind, params, &ci(1.0, Some(m), 0.999));
            assert_eq!(
                r.verdict,
                WhiteVerdict::Leak,
                "{m:?} not caught:\n{}",
                r.table()
            );
            assert!(r.ratio > at_least && r.ratio_lower > 1.0, "{}", r.table());
        }
    }
}

/// Noise x0.1 (a leak: ratio ~10 in epsilon, ~100 in rho) and noise x2 (over-noising: ~0.5 in
/// epsilon, ~0.25 in rho) are caught in every setting (AdaP-UCB, AdaC-UCB, the `ldp` wrapper
/// (x0.1), DP-SE (BAI), AdaC-GOPE, AdaC-OFUL), where the correct policies are tight on the same
/// designs (`white_box_is_tight_on_every_private_kind`). Power checks at confidence 0.95.
#[test]
fn white_box_catches_scaled_noise() {
    for kind in [
        "adap_ucb",
        "adac_ucb",
        "ldp",
        "dp_se_bai",
        "adac_gope",
        "adac_oful",
    ] {
        let params = registry::policy(kind).unwrap().info.example;
        let r = white(kind, params, &ci(0.1, None, 0.95));
        assert_eq!(r.verdict, WhiteVerdict::Leak, "{}", r.table());
        assert!(r.ratio_lower > 4.0, "{}", r.table());
        if kind == "ldp" {
            continue; // RR at epsilon 0.5: 2000 runs resolve 0.5 only to about +-0.2
        }
        let r = white(kind, params, &ci(2.0, None, 0.95));
        assert_eq!(r.verdict, WhiteVerdict::OverNoised, "{}", r.table());
        assert!(r.ratio < 0.7, "{}", r.table());
    }
}

/// The report's JSON has the black-box report's identification fields plus the ratio, and the
/// approximate-DP and non-private kinds are refused.
#[test]
fn white_box_report_and_refusals() {
    let o = (
        AuditOptions::default(),
        WhiteBoxOptions {
            samples: 200,
            targets: vec![0],
        },
    );
    let r = white("adap_ucb", "epsilon = 1.0", &o);
    let json = serde_json::to_value(&r).unwrap();
    for f in [
        "mode",
        "kind",
        "params",
        "budget",
        "claimed",
        "currency",
        "empirical",
        "ratio",
        "ratio_lower",
        "ratio_upper",
        "verdict",
        "confidence",
        "samples",
        "seconds",
        "targets",
    ] {
        assert!(json.get(f).is_some(), "{f}");
    }
    assert_eq!(json["currency"], "epsilon");
    let t = toml::Table::new();
    let err = audit_white_box("ucb1", &t, &o.0, &o.1)
        .unwrap_err()
        .to_string();
    assert!(err.contains("kind"), "{err}");
    let few = WhiteBoxOptions {
        samples: 10,
        targets: vec![],
    };
    let t: toml::Table = toml::from_str("epsilon = 1.0").unwrap();
    let err = audit_white_box("adap_ucb", &t, &o.0, &few)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("samples"), "{err}");
}

/// Deployment-grade noise (issue 28): every private kind (every kind whose record says so) builds with `noise =
/// "deployment"`, is `tight` in the white-box mode, its report says it is not reproducible from
/// the seed, and noise x0.1 is caught as a leak on one kind of each deployed family (discrete
/// Gaussian: AdaC-UCB; discrete Laplace on a mean: AdaP-UCB; on a sum: DP-SE (BAI); the
/// geometric sum of Lazy-DP-TS, whose deployment releases were invisible to the tap before;
/// the multivariate discrete Gaussian: AdaC-OFUL).
/// The runs draw OS-keyed noise, so the outcome is random: false failure of the tight legs
/// <= 1e-3 each (confidence 0.999, as `white_box_is_tight_on_every_private_kind`), about 1% for
/// the <= 17 kinds; the power legs (ratio ~10 in epsilon, ~100 in rho, lower end > 4) fail
/// spuriously with a probability far below 1e-6 at 2000 samples.
#[test]
fn white_box_on_deployment_noise() {
    let o = ci(1.0, None, 0.999);
    let mut deployed = 0;
    for e in private_kinds() {
        let mut t: toml::Table = toml::from_str(e.info.example).unwrap();
        t.insert("noise".into(), "deployment".into());
        if let Err(err) = e.build(t.clone()) {
            panic!("{}: every private kind deploys, but: {err}", e.kind());
        }
        deployed += 1;
        let r = audit_white_box(e.kind(), &t, &o.0, &o.1).unwrap();
        assert_eq!(r.verdict, WhiteVerdict::Tight, "{}", r.table());
        assert!(!r.reproducible, "{}", e.kind());
        assert!(r.table().contains("not reproducible"), "{}", r.table());
    }
    let recorded = registry::POLICIES
        .iter()
        .filter(|e| e.info.deployable())
        .count();
    assert_eq!(
        deployed, recorded,
        "deployable kinds (AlgorithmInfo::deployable)"
    );
    for kind in ["adac_ucb", "adap_ucb", "dp_se_bai", "dp_ts", "adac_oful"] {
        let mut t: toml::Table =
            toml::from_str(registry::policy(kind).unwrap().info.example).unwrap();
        t.insert("noise".into(), "deployment".into());
        let r = audit_white_box(kind, &t, &ci(0.1, None, 0.95).0, &o.1).unwrap();
        assert_eq!(r.verdict, WhiteVerdict::Leak, "{}", r.table());
        assert!(r.ratio_lower > 4.0, "{}", r.table());
    }
}
