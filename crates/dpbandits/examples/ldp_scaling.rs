//! E3 of spec ldp §6.2: regret at the horizon against T for a fixed number of segments L_T.
//!
//! The breakpoints of the experiment file are fractions of T, so each horizon is its own
//! experiment; this program runs the file once per horizon (replacing every `window` by the theory
//! value `ceil(sqrt(4 e T / (L_T + 4)))` of that horizon), then writes `scaling.csv`,
//! `slopes.csv` and a log-log plot `scaling.{svg,png}` with reference slopes 1/2 and 1.
//!
//! ```text
//! cargo run --release -p dpbandits --example ldp_scaling -- \
//!     experiments/ldp_e3_scaling.toml results/ldp_e3_scaling 1e4,3e4,1e5,3e5,1e6,3e6,1e7
//! ```

use dpbandits::experiment::plot::{PlotSpec, Role, Series, draw};
use dpbandits::experiment::{ExperimentSpec, Plan, run};
use dpbandits::finite::theory_window;
use dpbandits::math::stats::Summary;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The label without its `window=...` entry (the window changes with T).
fn family(label: &str) -> String {
    match label.find("window=") {
        None => label.to_string(),
        Some(i) => {
            let tail = &label[i..];
            let end = tail.find([',', ')']).unwrap_or(tail.len());
            let rest = tail[end..].trim_start_matches(',');
            format!(
                "{}{}w=theory{}{}",
                &label[..i],
                "",
                if rest.starts_with(')') { "" } else { "," },
                rest
            )
        }
    }
}

/// Least-squares slope of ln y on ln x.
fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    let (lx, ly): (Vec<f64>, Vec<f64>) = pts.iter().map(|&(x, y)| (x.ln(), y.ln())).unzip();
    let (mx, my) = (lx.iter().sum::<f64>() / n, ly.iter().sum::<f64>() / n);
    let sxy: f64 = lx.iter().zip(&ly).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = lx.iter().map(|x| (x - mx) * (x - mx)).sum();
    sxy / sxx
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args
        .first()
        .map_or("experiments/ldp_e3_scaling.toml", String::as_str);
    let out = PathBuf::from(args.get(1).map_or("results/ldp_e3_scaling", String::as_str));
    let horizons: Vec<u64> = args
        .get(2)
        .map_or("1e4,3e4,1e5,3e5,1e6", String::as_str)
        .split(',')
        .map(|s| s.trim().parse::<f64>().map(|x| x as u64))
        .collect::<Result<_, _>>()?;
    let spec = ExperimentSpec::from_toml(&std::fs::read_to_string(file)?)?;
    let segments = spec
        .env
        .get("breakpoint_fractions")
        .and_then(|v| v.as_array())
        .map_or(1, |a| a.len() as u64 + 1);
    std::fs::create_dir_all(&out)?;
    let mut csv = String::from("policy,T,window,mean,sem,runs,seconds\n");
    let mut fams: Vec<(String, Vec<(f64, f64)>)> = vec![];
    for &t in &horizons {
        let mut s = spec.clone();
        s.horizon = t;
        s.checkpoints.points = 10;
        let w = theory_window(t, segments);
        for p in &mut s.policy {
            if p.contains_key("window") {
                p.insert("window".into(), toml::Value::Integer(w as i64));
            }
        }
        let plan = Plan::new(s)?;
        let start = std::time::Instant::now();
        let outcome = run(&plan, &|| {});
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "T = {t}: {} cells x {} runs in {secs:.1} s",
            plan.cells.len(),
            plan.spec.runs
        );
        for (cell, res) in plan.cells.iter().zip(&outcome.cells) {
            let runs = res.as_ref().map_err(|e| e.to_string())?;
            let last = runs[0].len() - 1;
            let sm = Summary::of(&mut runs.iter().map(|r| r[last]).collect::<Vec<_>>());
            let fam = family(&cell.label());
            writeln!(
                csv,
                "\"{fam}\",{t},{w},{},{},{},{secs:.2}",
                sm.mean, sm.sem, sm.runs
            )?;
            match fams.iter_mut().find(|f| f.0 == fam) {
                Some(f) => f.1.push((t as f64, sm.mean)),
                None => fams.push((fam, vec![(t as f64, sm.mean)])),
            }
        }
    }
    std::fs::write(out.join("scaling.csv"), &csv)?;
    let mut slopes = String::from("policy,slope_all,slope_T_ge_1e5,slope_last3\n");
    for (fam, pts) in &fams {
        let big: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 >= 1e5).collect();
        let last3 = &pts[pts.len().saturating_sub(3)..];
        let f = |v: &[(f64, f64)]| if v.len() >= 2 { slope(v) } else { f64::NAN };
        writeln!(
            slopes,
            "\"{fam}\",{:.3},{:.3},{:.3}",
            f(pts),
            f(&big),
            f(last3)
        )?;
    }
    std::fs::write(out.join("slopes.csv"), &slopes)?;
    print!("{slopes}");
    let mut series: Vec<Series> = fams
        .iter()
        .map(|(f, p)| Series {
            name: f.clone(),
            points: p.clone(),
            band: None,
            role: Role::Data,
        })
        .collect();
    if let Some((_, p)) = fams.first() {
        let (t0, y0) = p[0];
        let t1 = *horizons.last().unwrap() as f64;
        series.push(Series {
            name: "slope 1/2 (reference)".into(),
            points: vec![(t0, y0), (t1, y0 * (t1 / t0).sqrt())],
            band: None,
            role: Role::Theory,
        });
        series.push(Series {
            name: "slope 1 (linear regret)".into(),
            points: vec![(t0, y0), (t1, y0 * t1 / t0)],
            band: None,
            role: Role::Theory,
        });
    }
    let files = draw(
        &out.join("scaling"),
        &PlotSpec {
            title: format!(
                "{}: regret R(T) vs T, L_T = {segments} fixed, theory window",
                spec.name
            ),
            x_label: "T".into(),
            y_label: "R(T)".into(),
            log_x: true,
            log_y: true,
            series,
            ..Default::default()
        },
    )?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
