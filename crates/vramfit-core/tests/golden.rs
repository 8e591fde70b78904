//! The golden file of estimates: every catalog model × precision × optimizer × attention ×
//! checkpointing × two batch/sequence sizes on CUDA, plus samples of what that grid does not
//! reach (gradient accumulation, optimizer implementations and state dtypes, the training
//! loop, zero_grad and the KV cache, the CPU oracle and its CUDA-autocast emulation). Each line holds the peak, its phase, the components at the
//! peak, the phase peaks, the model states and the warnings, to the byte.
//!
//! The test fails on any difference, so every changed number is a decision: when a change is
//! meant, regenerate the file with `scripts/golden.sh` and say in the commit why the numbers
//! moved.

use std::fmt::Write as _;
use std::path::Path;

use vramfit_core::{
    Attention, Checkpointing, DType, Device, LossKernel, ModelSpec, Optimizer, OptimizerImpl,
    Precision, TrainSetup, TrainingLoop, ZeroGrad, catalog, estimate_on,
};

const GOLDEN: &str = "tests/golden/estimates.txt";

/// `(batch, seq_len)` pairs of the full grid.
const SIZES: [(u64, u64); 2] = [(1, 512), (4, 2048)];

/// The grid's precisions: every one but pure fp16, which allocates as pure bf16 does, byte for
/// byte (`memory_twins_left_out_of_the_grid_estimate_alike` holds it).
fn precisions() -> impl Iterator<Item = Precision> {
    Precision::ALL.into_iter().filter(|&p| p != Precision::Fp16True)
}

/// The grid's optimizers: every one but `none` (no optimizer step), which allocates as SGD
/// without momentum does (`memory_twins_left_out_of_the_grid_estimate_alike`).
fn optimizers() -> impl Iterator<Item = Optimizer> {
    Optimizer::ALL.into_iter().filter(|&o| o != Optimizer::None)
}

/// Where a case runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum On {
    Cuda,
    CpuOracle,
    /// The CPU oracle with CUDA's autocast op lists (`--autocast-rules cuda`).
    CpuOracleCudaAutocast,
}

impl On {
    fn device(self) -> Device {
        match self {
            On::Cuda => Device::CUDA,
            On::CpuOracle => Device::CPU_ORACLE,
            On::CpuOracleCudaAutocast => {
                Device { autocast_fp32: Device::CUDA.autocast_fp32, ..Device::CPU_ORACLE }
            }
        }
    }
}

/// One case of the golden file.
struct Case {
    model: &'static str,
    setup: TrainSetup,
    on: On,
}

impl Case {
    fn key(&self) -> String {
        let s = &self.setup;
        let mut key = format!(
            "{} {} {} {} ckpt={} b{} s{}",
            self.model,
            s.precision,
            s.optimizer,
            s.attention,
            s.checkpointing,
            s.micro_batch,
            s.seq_len
        );
        if s.grad_accum != 1 {
            let _ = write!(key, " accum={}", s.grad_accum);
        }
        if s.optimizer_impl != OptimizerImpl::Foreach {
            let _ = write!(key, " impl={}", s.optimizer_impl);
        }
        if let Some(d) = s.optimizer_state_dtype {
            let _ = write!(key, " state={}", d.torch_name());
        }
        // The loop, zero_grad and the KV cache when they are not the defaults.
        let defaults = TrainSetup::default();
        if s.training_loop != defaults.training_loop {
            let _ = write!(key, " loop={}", s.training_loop);
        }
        if s.zero_grad != defaults.zero_grad {
            let _ = write!(key, " zero-grad={}", s.zero_grad);
        }
        if s.use_cache != defaults.use_cache {
            let cache = s.use_cache.map_or("config".to_string(), |c| c.to_string());
            let _ = write!(key, " use-cache={cache}");
        }
        if s.loss != LossKernel::Standard {
            let _ = write!(key, " loss={}", s.loss.name());
        }
        match self.on {
            On::Cuda => {}
            On::CpuOracle => key.push_str(" cpu-oracle"),
            On::CpuOracleCudaAutocast => key.push_str(" cpu-oracle+cuda-autocast"),
        }
        key
    }
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let plain = |model, setup| Case { model, setup, on: On::Cuda };
    for model in catalog::names() {
        for precision in precisions() {
            for optimizer in optimizers() {
                for attention in Attention::ALL {
                    for checkpointing in Checkpointing::ALL {
                        for (micro_batch, seq_len) in SIZES {
                            cases.push(plain(
                                model,
                                TrainSetup {
                                    micro_batch,
                                    seq_len,
                                    precision,
                                    optimizer,
                                    attention,
                                    checkpointing,
                                    ..TrainSetup::default()
                                },
                            ));
                        }
                    }
                }
            }
        }
        // Samples beyond the grid, at one size.
        let base = TrainSetup { micro_batch: 2, seq_len: 256, ..TrainSetup::default() };
        for checkpointing in Checkpointing::ALL {
            cases.push(plain(model, TrainSetup { grad_accum: 4, checkpointing, ..base.clone() }));
        }
        for optimizer_impl in [OptimizerImpl::ForLoop, OptimizerImpl::Fused] {
            for optimizer in [Optimizer::Adamw, Optimizer::Adafactor, Optimizer::Lion] {
                cases.push(plain(model, TrainSetup { optimizer_impl, optimizer, ..base.clone() }));
            }
        }
        for dtype in [DType::F32, DType::Bf16, DType::U8] {
            for precision in [Precision::Bf16, Precision::Bf16Mixed] {
                cases.push(plain(
                    model,
                    TrainSetup { optimizer_state_dtype: Some(dtype), precision, ..base.clone() },
                ));
            }
        }
        for precision in precisions() {
            for attention in Attention::ALL {
                for checkpointing in Checkpointing::ALL {
                    let setup = TrainSetup { precision, attention, checkpointing, ..base.clone() };
                    cases.push(Case { model, setup: setup.clone(), on: On::CpuOracle });
                    if precision.autocast() {
                        cases.push(Case { model, setup, on: On::CpuOracleCudaAutocast });
                    }
                }
            }
        }
        cases.push(Case {
            model,
            setup: TrainSetup {
                optimizer_impl: OptimizerImpl::ForLoop,
                grad_accum: 2,
                ..base.clone()
            },
            on: On::CpuOracle,
        });
        // What the loop and the model keep, each choice the defaults do not make.
        let defaults = TrainSetup::default();
        let mut kept = Vec::new();
        for training_loop in TrainingLoop::ALL.into_iter().filter(|l| *l != defaults.training_loop)
        {
            kept.push(TrainSetup { training_loop, ..base.clone() });
        }
        for zero_grad in ZeroGrad::ALL.into_iter().filter(|z| *z != defaults.zero_grad) {
            kept.push(TrainSetup { zero_grad, ..base.clone() });
        }
        for use_cache in [None, Some(true), Some(false)] {
            if use_cache != defaults.use_cache {
                kept.push(TrainSetup { use_cache, ..base.clone() });
            }
        }
        for setup in kept {
            cases.push(Case { model, setup: setup.clone(), on: On::Cuda });
            cases.push(Case { model, setup, on: On::CpuOracle });
        }
        // Checkpointing every n-th layer and the chunked (fused) loss.
        for (precision, checkpointing) in [
            (Precision::Fp32, Checkpointing::Every(2)),
            (Precision::Bf16Mixed, Checkpointing::Every(2)),
            (Precision::Bf16Mixed, Checkpointing::Every(3)),
        ] {
            cases.push(plain(model, TrainSetup { precision, checkpointing, ..base.clone() }));
        }
        for precision in precisions() {
            let loss = LossKernel::Chunked;
            cases.push(plain(model, TrainSetup { precision, loss, ..base.clone() }));
        }
        cases.push(plain(
            model,
            TrainSetup {
                loss: LossKernel::Chunked,
                checkpointing: Checkpointing::Every(2),
                grad_accum: 2,
                ..base.clone()
            },
        ));
    }
    cases
}

fn line(case: &Case, spec: &ModelSpec) -> String {
    let mut out = case.key();
    out.push_str(" | ");
    match estimate_on(spec, &case.setup, &case.on.device()) {
        Err(e) => {
            let _ = write!(out, "error: {e}");
        }
        Ok(e) => {
            let _ = write!(out, "peak {} {}", e.peak_allocated.get(), e.peak_phase.name());
            out.push_str(" | at peak");
            for (_, b) in e.components_at_peak.entries() {
                let _ = write!(out, " {}", b.get());
            }
            out.push_str(" | phases");
            for (_, b) in e.phase_peaks.entries() {
                let _ = write!(out, " {}", b.get());
            }
            let m = e.model_states_detail;
            let _ = write!(
                out,
                " | states {} {} {} {} | params {}",
                m.parameters.get(),
                m.gradients.get(),
                m.optimizer_state.get(),
                e.model_states.get(),
                e.parameters
            );
            for w in &e.warnings {
                let _ = write!(out, " | warning: {w}");
            }
        }
    }
    out
}

/// Every case's line, computed on all cores.
fn lines() -> Vec<String> {
    let cases = cases();
    let threads = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
    let chunk = cases.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = cases
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut spec_of: Option<(&str, ModelSpec)> = None;
                    part.iter()
                        .map(|case| {
                            if spec_of.as_ref().is_none_or(|(m, _)| *m != case.model) {
                                let json = catalog::config_json(case.model).expect("catalog");
                                let spec = ModelSpec::from_hf_config(json).expect("parses");
                                spec_of = Some((case.model, spec));
                            }
                            let (_, spec) = spec_of.as_ref().expect("set above");
                            line(case, spec)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("golden worker")).collect()
    })
}

#[test]
fn estimates_match_the_golden_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    let now = lines();
    if std::env::var_os("VRAMFIT_WRITE_GOLDEN").is_some() {
        let mut text = now.join("\n");
        text.push('\n');
        std::fs::write(&path, text).expect("write the golden file");
        return;
    }
    let golden = std::fs::read_to_string(&path).expect("read the golden file");
    let golden: Vec<&str> = golden.lines().collect();
    let mut diffs = Vec::new();
    for (i, line) in now.iter().enumerate() {
        let before = golden.get(i).copied().unwrap_or("<missing>");
        if before != line {
            diffs.push(format!("  was: {before}\n  now: {line}"));
        }
    }
    assert_eq!(
        golden.len(),
        now.len(),
        "the golden file has {} lines, the grid {}; regenerate it with scripts/golden.sh",
        golden.len(),
        now.len()
    );
    assert!(
        diffs.is_empty(),
        "{} of {} estimates changed (first 20 below); if that is meant, run scripts/golden.sh \
         and say why in the commit:\n{}",
        diffs.len(),
        now.len(),
        diffs.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

/// What the grid leaves out allocates as what it keeps: pure fp16 as pure bf16 (the same
/// sizes, no autocast, no master copy) and no optimizer as SGD without momentum (no state, no
/// temporaries in `step()`), on every catalog model, with either loss over the whole logits.
#[test]
fn memory_twins_left_out_of_the_grid_estimate_alike() {
    let numbers = |e: &vramfit_core::Estimate| {
        format!(
            "{:?} {:?} {:?} {:?} {:?}",
            e.peak_allocated, e.peak_phase, e.components_at_peak, e.phase_peaks, e.model_states
        )
    };
    for model in catalog::names() {
        let spec = ModelSpec::from_hf_config(catalog::config_json(model).expect("catalog"))
            .expect("catalog models resolve");
        for loss in [LossKernel::Standard, LossKernel::LogitsSum] {
            for attention in Attention::ALL {
                let base = TrainSetup {
                    micro_batch: 2,
                    seq_len: 256,
                    attention,
                    loss,
                    ..TrainSetup::default()
                };
                let pairs = [
                    (
                        TrainSetup { precision: Precision::Fp16True, ..base.clone() },
                        TrainSetup { precision: Precision::Bf16, ..base.clone() },
                    ),
                    (
                        TrainSetup { optimizer: Optimizer::None, ..base.clone() },
                        TrainSetup { optimizer: Optimizer::Sgd, ..base.clone() },
                    ),
                ];
                // T5 clamps its residual stream after every sub-layer in pure fp16 (and only
                // then): fp16-true is not bf16's twin there (`seq2seq` unit tests hold it).
                let twins = if spec.is_encoder_decoder() { &pairs[1..] } else { &pairs[..] };
                for (twin, kept) in twins {
                    for device in [Device::CUDA, Device::CPU_ORACLE] {
                        // A setup the model refuses is refused alike for both.
                        match (estimate_on(&spec, twin, &device), estimate_on(&spec, kept, &device))
                        {
                            (Ok(a), Ok(b)) => assert_eq!(
                                numbers(&a),
                                numbers(&b),
                                "{model}: {twin:?} against {kept:?}"
                            ),
                            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{model}"),
                            (a, b) => panic!("{model}: {a:?} against {b:?}"),
                        }
                    }
                }
            }
        }
    }
}
