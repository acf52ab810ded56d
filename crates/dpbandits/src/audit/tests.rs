use super::*;

fn private_kinds() -> Vec<&'static registry::PolicyEntry> {
    registry::POLICIES
        .iter()
        .filter(|e| e.example().is_ok_and(|b| guarantee(&b).is_private()))
        .collect()
}

#[test]
#[ignore]
fn explore() {
    let runs: u64 = std::env::var("AUDIT_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let m: f64 = std::env::var("AUDIT_M").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let only = std::env::var("AUDIT_KIND").ok();
    for e in private_kinds() {
        if only.as_deref().is_some_and(|k| k != e.kind()) {
            continue;
        }
        let params: toml::Table = toml::from_str(e.info.example).unwrap();
        let opts = AuditOptions {
            runs,
            noise_multiplier: m,
            ..AuditOptions::default()
        };
        match audit(e.kind(), &params, &opts) {
            Ok(r) => print!("{}", r.table()),
            Err(err) => println!("{}: ERROR {err}", e.kind()),
        }
    }
}
