//! The golden file of the caching allocator's replay: for a grid of catalog models × precision
//! × checkpointing × loop × sizes, several `PYTORCH_CUDA_ALLOC_CONF` settings and several GPUs,
//! the reserved peak, the fragmentation at it, the allocator's allocated peak, the allocation
//! that set the reserved peak and the iterations replayed, to the byte. The allocated figures
//! are the other golden file's (`tests/golden.rs`); this one holds what only the replay
//! decides, so that a change of the allocator's data structures is proven to change nothing.
//!
//! When a change of these numbers is meant, rewrite the file with
//! `VRAMFIT_WRITE_GOLDEN=1 cargo test -p vramfit-core --test reserved` and say in the commit
//! why they moved.

use std::path::Path;

use vramfit_core::{
    AllocConf, Checkpointing, Device, Parallel, Precision, Strategy, TrainSetup, TrainingLoop,
    catalog, estimate_on,
};

const GOLDEN: &str = "tests/golden/reserved.txt";

fn lines() -> Vec<String> {
    let confs = [
        "",
        "expandable_segments:True",
        "max_split_size_mb:128",
        "roundup_power2_divisions:4",
        "max_split_size_mb:20,max_non_split_rounding_mb:64",
    ];
    let mut cases = Vec::new();
    for model in catalog::names() {
        // Encoder-decoder models (T5) are modelled with eager attention only.
        let spec = vramfit_core::ModelSpec::from_hf_config(catalog::config_json(model).unwrap());
        let attention = if spec.is_ok_and(|s| s.is_encoder_decoder()) {
            vramfit_core::Attention::Eager
        } else {
            TrainSetup::default().attention
        };
        for precision in [Precision::Fp32, Precision::Bf16Mixed] {
            for checkpointing in [Checkpointing::None, Checkpointing::Full] {
                for training_loop in [TrainingLoop::Trainer, TrainingLoop::Custom] {
                    for (micro_batch, seq_len) in [(1, 512), (3, 1000)] {
                        let setup = TrainSetup {
                            micro_batch,
                            seq_len,
                            precision,
                            checkpointing,
                            training_loop,
                            attention,
                            ..TrainSetup::default()
                        };
                        for conf in confs {
                            cases.push((model, setup.clone(), conf));
                        }
                    }
                }
            }
        }
        let base = TrainSetup { micro_batch: 2, seq_len: 256, ..TrainSetup::default() };
        for strategy in [Strategy::Ddp, Strategy::Zero2, Strategy::Zero3, Strategy::Fsdp] {
            let parallel = Parallel { gpus_per_node: 8, strategy, ..Parallel::default() };
            let setup = TrainSetup {
                parallel,
                precision: Precision::Bf16Mixed,
                grad_accum: 2,
                ..base.clone()
            };
            cases.push((model, setup, ""));
        }
    }
    let specs: Vec<_> = catalog::names()
        .into_iter()
        .map(|m| (m, vramfit_core::ModelSpec::from_hf_config(catalog::config_json(m).unwrap())))
        .collect();
    cases
        .into_iter()
        .map(|(model, setup, conf)| {
            let spec = specs.iter().find(|(m, _)| *m == model).unwrap().1.as_ref().unwrap();
            let device =
                Device { allocator: Some(AllocConf::parse(conf).unwrap()), ..Device::CUDA };
            let s = &setup;
            let key = format!(
                "{model} {} ckpt={} loop={} b{} s{} accum={} gpus={} {:?} [{conf}]",
                s.precision,
                s.checkpointing,
                s.training_loop,
                s.micro_batch,
                s.seq_len,
                s.grad_accum,
                s.parallel.gpus_per_node,
                s.parallel.strategy
            );
            match estimate_on(spec, s, &device) {
                Ok(e) => format!("{key} | {:?}", e.reserved),
                Err(err) => format!("{key} | error: {err}"),
            }
        })
        .collect()
}

#[test]
fn reserved_memory_matches_the_golden_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    let now = lines();
    let mut text = now.join("\n");
    text.push('\n');
    if std::env::var_os("VRAMFIT_WRITE_GOLDEN").is_some() {
        std::fs::write(&path, text).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).expect("read the golden file");
    let diffs: Vec<String> = golden
        .lines()
        .zip(&now)
        .filter(|(was, now)| was != now)
        .take(20)
        .map(|(was, now)| format!("  was: {was}\n  now: {now}"))
        .collect();
    assert_eq!(golden.lines().count(), now.len(), "the grid changed; rewrite the golden file");
    assert!(diffs.is_empty(), "reserved memory changed (first 20 below):\n{}", diffs.join("\n"));
}
