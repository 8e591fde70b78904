use vramfit_core::*;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let owned = if a[1].ends_with(".json") {
        std::fs::read_to_string(&a[1]).unwrap()
    } else {
        catalog::config_json(&a[1]).unwrap().to_string()
    };
    let json = owned.as_str();
    let spec = ModelSpec::from_hf_config(json).unwrap();
    let setup = TrainSetup {
        micro_batch: a[2].parse().unwrap(),
        seq_len: a[3].parse().unwrap(),
        precision: a[4].parse().unwrap(),
        optimizer: a[5].parse().unwrap(),
        optimizer_state_dtype: None,
        attention: a[6].parse().unwrap(),
        checkpointing: a[7].parse().unwrap(),
        grad_accum: a[8].parse().unwrap(),
        target: Target::CpuOracle,
        optimizer_impl: if a.len() > 9 { OptimizerImpl::ForLoop } else { OptimizerImpl::Foreach },
    };
    let e = estimate(&spec, &setup).unwrap();
    println!("{}", serde_json::to_string(&e).unwrap());
}
