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
