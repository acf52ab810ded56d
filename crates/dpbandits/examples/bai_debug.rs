use dpbandits::bai::*;
use dpbandits::experiment::bai::run_seeds;
fn main() {
    let inst = BaiInstance::new(vec![0.95, 0.9, 0.9, 0.9, 0.5]).unwrap();
    let eps = 0.00215443469;
    let mut c = dp_tt::DpTtConfig::new(eps);
    c.lazy = 0.01;
    let alg = c.build(5, 0.01).unwrap();
    for r in 0..50 {
        let o = alg.run(&inst, run_seeds(20251, &c.label(), r), 1_000_000_000_000).unwrap();
        if o.tau > 1_000_000_000 {
            println!("run {r}: {o:?}");
        }
    }
}
