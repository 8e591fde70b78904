fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("llama-3.2-1b", String::as_str);
    let json = vramfit_core::catalog::config_json(name).expect("catalog name");
    let spec = vramfit_core::ModelSpec::from_hf_config(json).expect("parses");
    let setup =
        vramfit_core::TrainSetup { target: vramfit_core::Target::CpuOracle, ..Default::default() };
    let e = vramfit_core::estimate(&spec, &setup).expect("estimate");
    println!("{}", serde_json::to_string_pretty(&e).unwrap());
}
