use dpbandits::bai::*;
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let means: Vec<f64> = args[1].split(',').map(|x| x.parse().unwrap()).collect();
    let eps: f64 = args[2].parse().unwrap();
    let runs: u64 = args[3].parse().unwrap();
    let lazy: f64 = args.get(4).map(|x| x.parse().unwrap()).unwrap_or(0.0);
    let inst = BaiInstance::new(means).unwrap();
    let mut cfgs: Vec<Box<dyn BaiConfig>> = vec![];
    cfgs.push(Box::new(eb_tci::EbTciConfig::default()));
    cfgs.push(Box::new(eb_tci::EbTciConfig { beta: 0.5, threshold: ThresholdKind::Eb }));
    for th in [ThresholdKind::R, ThresholdKind::HHalf, ThresholdKind::HArm] {
        let mut c = dp_tt::DpTtConfig::new(eps);
        c.threshold = th;
        c.lazy = lazy;
        cfgs.push(Box::new(c));
    }
    for star in [false, true] {
        let mut c = adap_tt::AdapTtConfig::new(eps, star);
        c.lazy = lazy;
        cfgs.push(Box::new(c));
    }
    for c in &cfgs {
        let alg = c.build(inst.k(), 0.01).unwrap();
        let t0 = std::time::Instant::now();
        let (mut s, mut err, mut cap) = (0.0, 0, 0);
        for r in 0..runs {
            let o = alg.run(&inst, RunSeeds { env: r, policy: r + 1000, noise: r + 2000 }, 1_000_000_000).unwrap();
            s += o.tau as f64;
            err += (!o.correct) as u32;
            cap += o.capped as u32;
        }
        println!("{:60} mean tau {:10.0} err {} cap {} {:.3}s", c.label(), s / runs as f64, err, cap, t0.elapsed().as_secs_f64());
    }
}
