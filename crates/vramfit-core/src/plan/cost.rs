//! The cost model: how long one optimizer step of a setup takes, relative to the user's own
//! setup. Every constant is here, each with the published measurement it comes from (the
//! sources are in `docs/plan.md`); nothing else in the planner holds a speed figure.
//!
//! A step is `k` micro-batches (the global batch is fixed, so the number of optimizer steps
//! per epoch is too). One micro-batch costs a fixed overhead per layer (kernel launches,
//! Python, the framework's bookkeeping, which does not shrink with the batch) plus its FLOPs at
//! the GPU's achievable rate:
//!
//! ```text
//! t_micro = (layers × LAYER_OVERHEAD_S + FLOPs(micro) / (peak × MFU)) × (1 + RECOMPUTE × checkpointed fraction) × (QLORA_FACTOR with a 4-bit base)
//! t_step  = k × t_micro × optimizer factor × (1 + near-limit penalty)
//! ```
//!
//! That is the utilisation curve: at small micro-batches the overhead dominates and a step of
//! `k` micro-batches takes nearly `k` times as long (t5-base's step time is flat from batch 1
//! to 32); at large ones the FLOPs dominate and accumulation costs little. FLOPs per token are
//! `6 N + 12 L s d` (forward 2N, backward 4N, attention's score and value products), with
//! `4 N + 2 N_trainable` for the weights when only adapters train.

use serde::Serialize;

use crate::model::ModelSpec;
use crate::setup::{Optimizer, OptimizerImpl, Precision, TrainSetup};

/// Achievable fraction of the dense peak (model FLOPs utilisation): torchtitan's Llama-3 70B
/// on H100 with full checkpointing, 50.5 % at local batch 2 (`docs/performance.md`); Megatron
/// reaches 41.5–56 % (ml-engineering `training/performance`).
pub const MFU: f64 = 0.50;

/// Fixed cost of one micro-batch per layer, in seconds: t5-base (24 layers) on an A100 with the
/// HF Trainer steps in 0.129 s at batch 1 and 0.142 s at batch 32 (transformers #15026); the
/// straight line through those points has 0.1285 s at batch 0, 5.35 ms per layer.
pub const LAYER_OVERHEAD_S: f64 = 0.1285 / 24.0;

/// Full activation checkpointing adds this fraction to a micro-batch's time: Megatron Bridge's
/// "+30 % per layer", Korthikanti et al.'s full vs selective recompute 1.29–1.32×, the seed
/// article's "thirty percent"; HF's guidance says ~20 %, the FLOP count (one more forward of
/// three units) 33 %. Every n-th layer costs the fraction of layers it recomputes.
pub const RECOMPUTE: f64 = 0.30;

/// The most a 16-bit precision speeds up a whole fp32 step: 4.3× measured end to end (fp16
/// 142.24 vs fp32 32.86 items/s, milabench PR #107), even where the tensor-core peak is 16×
/// the fp32 peak (A100): the step's memory-bound part does not speed up as matmuls do.
pub const MIXED_PRECISION_MAX_SPEEDUP: f64 = 4.3;

/// Adafactor's step time against AdamW's: 112.95 vs 89.2 samples/s on an RTX 3090 with the
/// HF Trainer (transformers PR #14744).
pub const ADAFACTOR_FACTOR: f64 = 112.95 / 89.2;

/// Fused AdamW against foreach: litgpt measured 2–3 ms per step (PR #857), apex's FusedAdam
/// 10–15 % end to end against the for-loop AdamW of 2022 (pytorch #71274); we take 2 %.
pub const FUSED_FACTOR: f64 = 0.98;

/// 8-bit AdamW against AdamW, by model size: ViT-H (630 M parameters) runs 43.6 vs 41.9 img/s
/// (faster: the optimizer's memory traffic shrinks), Llama-2-7B full fine-tuning 3000 vs
/// 3200 tok/s (slower: dequantisation); torchao's `torchao/optim/README.md`. Interpolated in
/// log(parameters) between the two, flat outside them.
pub const EIGHT_BIT_ANCHORS: [(f64, f64); 2] = [(630e6, 41.9 / 43.6), (6.74e9, 3200.0 / 3000.0)];

/// Throughput collapses before an OOM: the caching allocator frees its cache and retries
/// `cudaMalloc`. fms-fsdp #63: batch 12 → 14 at the limit, 6.83 → 4.91 (−28 %); OpenTau PR
/// #273: 7.0 samples/s at 91 % of the card reserved, 6.2 at 98 %, 4.9 at 97 % with more
/// retries. Device use from `NEAR_LIMIT_START` of the CUDA-visible memory costs a penalty
/// growing linearly to `NEAR_LIMIT_PENALTY` at `NEAR_LIMIT_FULL` and beyond.
pub const NEAR_LIMIT_START: f64 = 0.92;
/// Where the penalty is whole (the default 3 % margin ends there).
pub const NEAR_LIMIT_FULL: f64 = 0.97;
/// 1 / (1 − 0.28) − 1: the step time of a run 28 % slower.
pub const NEAR_LIMIT_PENALTY: f64 = 1.0 / 0.72 - 1.0;

/// Paged optimizers page their state over PCIe at "about half or worse than the full PCIe
/// memory bandwidth" (bitsandbytes `docs/source/optimizers.mdx`; its example: 1 GB per step ≈
/// 1 / (16 GB/s × 0.5) = 125 ms on PCIe 3.0 x16). We take PCIe 4.0 x16, 31 GB/s nominal (the
/// generation of the Ampere cards; ml-engineering `network/README.md`), at half: both ways.
pub const PAGED_GBPS: f64 = 31.0 * 0.5;

/// Seconds a paged optimizer adds per step when `spilled` bytes of its state do not fit on the
/// card: paged out and back in every step ("zero overhead if all the memory fits").
pub fn paging_seconds(spilled: u64) -> f64 {
    2.0 * spilled as f64 / (PAGED_GBPS * 1e9)
}

/// What each change is charged on top of its step time when plans are ranked: 5 %, the size
/// of the speed effects the sources cannot tell from noise (8-bit AdamW −6 … +4 %, Liger's
/// fused loss ±1.6 %, fused AdamW 2 %), so that a plan makes a change only when it buys more
/// than that and the cheapest plans are also the simplest. A policy, not a measurement.
pub const CHANGE_COST: f64 = 0.05;

/// A plan's cost for ranking: its relative step time, charged [`CHANGE_COST`] per change.
pub fn ranking_cost(relative_step_time: f64, changes: usize) -> f64 {
    relative_step_time * (1.0 + CHANGE_COST * changes as f64)
}

/// Where the catalog has no throughput figure: a nominal 16-bit peak (relative step times
/// only; no tokens/s are printed) and fp32 at the measured end-to-end ratio below it.
pub const FALLBACK_TENSOR16_TFLOPS: f64 = 100.0;

/// QLoRA's step time against LoRA's (the same adapters on a 16-bit base): 1.66×, from Google
/// Cloud's Vertex AI LoRA/QLoRA recommendations ("LoRA is about 66% faster than QLoRA in terms
/// of tuning speed", `cloud.google.com/vertex-ai/generative-ai/docs/model-garden/lora-qlora`),
/// the one published central figure; NVIDIA NeMo's QLoRA guide gives the range, "between 50%
/// and 200% slower than LoRA" (`docs.nvidia.com/nemo-framework/user-guide/latest/sft_peft/
/// qlora.html`), i.e. 1.5–3.0×, without a central value; 1.66 lies inside that range, near its
/// low end, and the same guide's "up to 60% more memory-efficient" is what the estimate
/// computes instead. Charged on every micro-batch: the 4-bit weights are dequantised in each
/// forward and backward matmul.
pub const QLORA_FACTOR: f64 = 1.66;

/// Attention kernels (eager → SDPA → flash) are costed alike: the same FLOPs, and the fused
/// kernels' speed-up is not credited (no end-to-end figure in the sources we hold).
/// Chunked cross-entropy is costed as the full logits: DeepSpeed PR #8540 measured Liger's
/// fused loss at ±1.6 % tokens/s (TinyLlama +0.4 %, pythia-1.4b +1.6 %, Llama-3.1-8B −0.7 %).
/// `expandable_segments` costs nothing (Megatron Bridge's Llama3-70B: 0 %).
pub const SAME_SPEED: f64 = 1.0;

/// ZeRO-3 / FSDP move 1.5× DDP's bytes per step (ZeRO, arXiv 1910.02054; ZeRO-1/2 move as
/// much as DDP): parameters gathered in forward and again in backward, gradients
/// reduce-scattered, each (n − 1)/n of the 16-bit parameters, against DDP's all-reduce of two
/// such volumes. [`communication_seconds`] counts those volumes per micro-batch.
pub const ZERO3_COMMUNICATION: f64 = 1.5;

/// Achieved fraction of a link's nominal bandwidth: 88 %, measured on PCIe 5 x16 (55.4 of 63
/// GB/s) and NVLink 4 (396.4 of 450 GB/s; ml-engineering `network/README.md`).
pub const LINK_EFFICIENCY: f64 = 0.88;

/// PCIe 4 x16, one way, GB/s: the link between GPUs without NVLink (the catalog's consumer
/// and PCIe cards).
pub const PCIE4_GBPS: f64 = 31.0;

/// Between nodes, GB/s per GPU: one InfiniBand HDR 200 Gb/s adapter per GPU (25 GB/s), the
/// common layout of training clusters; a ring over several nodes is bounded by it.
pub const INTER_NODE_GBPS: f64 = 25.0;

/// The bandwidth a rank's collectives get, bytes per second: NVLink where the board has it,
/// PCIe otherwise, bounded by the network between nodes, each at [`LINK_EFFICIENCY`].
pub fn collective_bytes_per_second(nvlink_gbps: Option<f64>, nodes: u64) -> f64 {
    let mut gbps = nvlink_gbps.unwrap_or(PCIE4_GBPS);
    if nodes > 1 {
        gbps = gbps.min(INTER_NODE_GBPS);
    }
    gbps * LINK_EFFICIENCY * 1e9
}

/// Host ↔ device bandwidth measured on PCIe 5 x16: 55.4 GB/s (88 % of 63; ml-engineering
/// `network/README.md`); PCIe 4 x16 is 31 GB/s nominal.
pub const PCIE_GBPS: f64 = 55.4;

/// Parameters per second an offloaded optimizer steps: DeepSpeed's ZeRO-Offload (untuned) on
/// ViT-giant, 1.1 B parameters, took 3.13 s per step against 1.27 s on the GPU alone (a
/// desktop Ryzen 5600; torchao `torchao/optim/README.md`): 1.1e9 / 1.86 s. Megatron Bridge
/// also finds the CPU optimizer the bottleneck (4.2× the step at 100 % offload).
pub const CPU_ADAM_PARAMS_PER_S: f64 = 1.1e9 / (3.13 - 1.27);

/// Seconds an offloaded optimizer adds per step: its states and gradients over PCIe both ways
/// and the CPU Adam step, whichever is longer (they overlap).
pub fn offload_step_seconds(params: u64, bytes_moved: u64) -> f64 {
    let transfer = bytes_moved as f64 / (PCIE_GBPS * 1e9);
    let compute = params as f64 / CPU_ADAM_PARAMS_PER_S;
    transfer.max(compute)
}

/// Seconds of one step's collectives on one rank, for `micro_batches` micro-batches of a
/// model whose `trainable` parameters are reduced (2 bytes each: 16-bit gradients and
/// parameters on the wire) and all `parameters` gathered where the strategy shards them. A
/// ring moves (n − 1)/n of a tensor per rank for a reduce-scatter or an all-gather, twice that
/// for an all-reduce. DDP and ZeRO-1 reduce once per step (`no_sync` during accumulation);
/// ZeRO-2 reduce-scatters every micro-batch; ZeRO-3 and FSDP also gather the parameters in
/// each micro-batch's forward and backward; HSDP shards within a node and all-reduces the
/// shards across nodes.
pub fn communication_seconds(
    setup: &TrainSetup,
    parameters: f64,
    trainable: f64,
    micro_batches: f64,
    bytes_per_second: f64,
) -> f64 {
    use crate::parallel::Strategy;
    let p = &setup.parallel;
    let n = p.ranks() as f64;
    if n <= 1.0 {
        return 0.0;
    }
    let ring = (n - 1.0) / n;
    let grads = 2.0 * trainable * ring;
    let params = 2.0 * parameters * ring;
    let bytes = match p.strategy {
        Strategy::None => 0.0,
        Strategy::Ddp | Strategy::Zero1 => 2.0 * grads,
        Strategy::Zero2 => micro_batches * grads + params,
        Strategy::Zero3 | Strategy::Fsdp | Strategy::Hsdp => micro_batches * (grads + 2.0 * params),
    };
    bytes / bytes_per_second
}

/// Seconds the host adds to a step: the optimizer stepped on the CPU (gradients down and
/// 16-bit parameters up, 4 bytes per trainable parameter of the rank's shard, and CPU Adam),
/// and offloaded parameters brought to the GPU in every micro-batch's forward and backward
/// (2 × 2 bytes per parameter of the shard). Not overlapped with compute: DeepSpeed's CPU
/// Adam is the bottleneck where it is measured (Megatron Bridge: the CPU step dominates).
pub fn host_seconds(
    setup: &TrainSetup,
    parameters: f64,
    trainable: f64,
    micro_batches: f64,
) -> f64 {
    let p = &setup.parallel;
    let shard = p.shard_world().max(1) as f64;
    let mut seconds = 0.0;
    if p.offload.optimizer() || p.offload.params() {
        // FSDP's CPUOffloadPolicy steps the optimizer on the CPU with the parameters.
        let stepped = trainable / shard;
        seconds += offload_step_seconds(stepped as u64, (4.0 * stepped) as u64);
    }
    if p.offload.params() {
        // PCIe 4 (the catalog's cards are mostly PCIe 4 hosts), as achieved.
        let host_link = PCIE4_GBPS * LINK_EFFICIENCY * 1e9;
        seconds += micro_batches * 4.0 * parameters / shard / host_link;
    }
    seconds
}

/// What the cost model needs of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelFacts {
    /// Parameters a token passes through (a mixture of experts' routed share).
    pub active_parameters: f64,
    /// Decoder layers.
    pub layers: f64,
    /// Width of the attention's query (heads × head size).
    pub attention_width: f64,
    /// All parameters (for the 8-bit optimizer's anchors).
    pub parameters: f64,
}

impl ModelFacts {
    /// From a spec.
    pub fn of(spec: &ModelSpec) -> ModelFacts {
        let parameters = spec.parameter_count() as f64;
        let active = match &spec.moe {
            Some(moe) if moe.experts > 0 => {
                let per_expert =
                    3.0 * spec.hidden_size as f64 * moe.expert_intermediate_size as f64;
                let idle = moe.experts.saturating_sub(moe.top_k) as f64;
                let sparse = spec.n_layers.saturating_sub(spec.dense_mlp_layers.len() as u64);
                (parameters - sparse as f64 * idle * per_expert).max(parameters / 8.0)
            }
            _ => parameters,
        };
        ModelFacts {
            active_parameters: active,
            layers: spec.n_layers.max(1) as f64,
            attention_width: spec.q_width() as f64,
            parameters,
        }
    }
}

/// The GPU's achievable FLOP rates, FLOP/s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// fp32 matmuls.
    pub fp32: f64,
    /// 16-bit tensor-core matmuls.
    pub tensor16: f64,
    /// Whether they come from the catalog (tokens/s are given only then).
    pub known: bool,
    /// The board's NVLink bandwidth, one way, GB/s (PCIe without).
    pub nvlink_gbps: Option<f64>,
}

impl Rates {
    /// From the catalog's peaks (fp32, 16-bit tensor), or the fallback.
    pub fn of(tflops: Option<(f64, f64)>) -> Rates {
        Rates::with_links(tflops, None)
    }

    /// From the catalog's peaks and NVLink bandwidth.
    pub fn with_links(tflops: Option<(f64, f64)>, nvlink_gbps: Option<f64>) -> Rates {
        let (fp32, tensor16, known) = match tflops {
            Some((f, t)) => (f, t, true),
            None => (0.0, FALLBACK_TENSOR16_TFLOPS, false),
        };
        let fp32 = fp32.max(tensor16 / MIXED_PRECISION_MAX_SPEEDUP);
        Rates { fp32: fp32 * 1e12 * MFU, tensor16: tensor16 * 1e12 * MFU, known, nvlink_gbps }
    }

    fn for_precision(&self, p: Precision) -> f64 {
        match p {
            Precision::Fp32 => self.fp32,
            Precision::Fp16Mixed | Precision::Bf16Mixed | Precision::Bf16 | Precision::Fp16True => {
                self.tensor16
            }
        }
    }
}

/// The cost of one step of a setup.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    /// What plans are ranked by: the relative step time charged per change
    /// ([`ranking_cost`]).
    pub cost: f64,
    /// Step time against the user's setup (as if it fit): 1.0 is as fast.
    pub relative_step_time: f64,
    /// Seconds per optimizer step, when the catalog gives the GPU's throughput.
    pub step_seconds: Option<f64>,
    /// Tokens per second over the data-parallel GPUs, when the step time is known.
    pub tokens_per_second: Option<f64>,
    /// The near-limit penalty included (0: none).
    pub near_limit_penalty: f64,
}

/// Seconds of one optimizer step of `setup` (its micro-batch and accumulation), without the
/// near-limit penalty. `trainable` is the trainable parameter count (all, or adapters).
pub fn step_seconds(facts: &ModelFacts, setup: &TrainSetup, trainable: f64, rates: &Rates) -> f64 {
    let tokens = (setup.micro_batch * setup.seq_len) as f64;
    let n = facts.active_parameters;
    let trainable = trainable.min(facts.parameters);
    // Forward 2N; backward 2N for the inputs' gradients and 2N for the weights' (only those
    // that train: adapters are a small addition, counted at 6 per parameter).
    let weights = if trainable < facts.parameters { 4.0 * n + 6.0 * trainable } else { 6.0 * n };
    let attention = 12.0 * facts.layers * setup.seq_len as f64 * facts.attention_width;
    let flops = tokens * (weights + attention);
    let compute = flops / rates.for_precision(setup.precision);
    let recomputed = setup.checkpointing.checkpointed_layers(facts.layers as u64) as f64;
    let recompute = 1.0 + RECOMPUTE * recomputed / facts.layers;
    let quantized = if setup.quantization.is_some() { QLORA_FACTOR } else { SAME_SPEED };
    let micro = (facts.layers * LAYER_OVERHEAD_S + compute) * recompute * quantized;
    let k = setup.grad_accum as f64;
    let computing = k * micro * optimizer_factor(setup, facts.parameters);
    // Collectives overlap with compute (torchtitan's FSDP: 8 → 128 GPUs costs 2.7 %); they
    // show where they take longer (small per-GPU batches, OLMo #762).
    let link = collective_bytes_per_second(rates.nvlink_gbps, setup.parallel.nodes);
    let communicating = communication_seconds(setup, facts.parameters, trainable, k, link);
    computing.max(communicating) + host_seconds(setup, facts.parameters, trainable, k)
}

/// The optimizer's effect on the step time.
pub fn optimizer_factor(setup: &TrainSetup, parameters: f64) -> f64 {
    match (setup.optimizer, setup.optimizer_impl) {
        (Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit, _) => eight_bit_factor(parameters),
        (Optimizer::Adafactor, _) => ADAFACTOR_FACTOR,
        (_, OptimizerImpl::Fused) => FUSED_FACTOR,
        _ => SAME_SPEED,
    }
}

/// 8-bit AdamW's factor at this size (see [`EIGHT_BIT_ANCHORS`]).
pub fn eight_bit_factor(parameters: f64) -> f64 {
    let [(p0, f0), (p1, f1)] = EIGHT_BIT_ANCHORS;
    let x = ((parameters.max(1.0).ln() - p0.ln()) / (p1.ln() - p0.ln())).clamp(0.0, 1.0);
    f0 + x * (f1 - f0)
}

/// The near-limit penalty at this device use (a fraction of the CUDA-visible memory).
pub fn near_limit_penalty(fraction_of_card: f64) -> f64 {
    let x = (fraction_of_card - NEAR_LIMIT_START) / (NEAR_LIMIT_FULL - NEAR_LIMIT_START);
    NEAR_LIMIT_PENALTY * x.clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::Checkpointing;

    fn gpt2() -> (ModelFacts, TrainSetup) {
        let spec = ModelSpec::from_hf_config(crate::catalog::config_json("gpt2").unwrap()).unwrap();
        (
            ModelFacts::of(&spec),
            TrainSetup { micro_batch: 16, seq_len: 512, ..TrainSetup::default() },
        )
    }

    #[test]
    fn checkpointing_costs_thirty_percent_of_the_layers_it_recomputes() {
        let (facts, setup) = gpt2();
        let rates = Rates::of(Some((29.8, 59.5)));
        let t = |c| {
            step_seconds(
                &facts,
                &TrainSetup { checkpointing: c, ..setup.clone() },
                facts.parameters,
                &rates,
            )
        };
        let none = t(Checkpointing::None);
        assert!((t(Checkpointing::Full) / none - 1.30).abs() < 1e-9);
        assert!((t(Checkpointing::Every(2)) / none - 1.15).abs() < 1e-9);
    }

    #[test]
    fn accumulation_is_nearly_free_at_large_micro_batches_and_not_at_small_ones() {
        let (facts, setup) = gpt2();
        let rates = Rates::of(Some((29.8, 59.5)));
        let t = |micro, k| {
            step_seconds(
                &facts,
                &TrainSetup { micro_batch: micro, grad_accum: k, ..setup.clone() },
                facts.parameters,
                &rates,
            )
        };
        let whole = t(16, 1);
        // GPT-2 is small: its micro-batch overhead is a fifth of the step at 16 × 512 tokens.
        assert!(t(8, 2) / whole < 1.3, "{}", t(8, 2) / whole);
        assert!(t(1, 16) / whole > 2.0, "{}", t(1, 16) / whole);
        // Monotone: smaller micro-batches never make the step faster.
        assert!(t(1, 16) > t(2, 8) && t(2, 8) > t(4, 4) && t(4, 4) > t(8, 2) && t(8, 2) > whole);
    }

    #[test]
    fn mixed_precision_is_faster_but_never_beyond_the_measured_ratio() {
        let (facts, setup) = gpt2();
        for tflops in [Some((19.5, 312.0)), Some((29.8, 59.5)), None] {
            let rates = Rates::of(tflops);
            let fp32 = TrainSetup { precision: Precision::Fp32, ..setup.clone() };
            let bf16 = TrainSetup { precision: Precision::Bf16Mixed, ..setup.clone() };
            let ratio = step_seconds(&facts, &fp32, facts.parameters, &rates)
                / step_seconds(&facts, &bf16, facts.parameters, &rates);
            assert!(
                ratio > 1.0 && ratio <= MIXED_PRECISION_MAX_SPEEDUP + 1e-9,
                "{tflops:?}: {ratio}"
            );
        }
    }

    #[test]
    fn a_4bit_base_costs_qlora_factor_times_lora() {
        let (facts, setup) = gpt2();
        let rates = Rates::of(Some((29.8, 59.5)));
        let lora = TrainSetup { lora: Some(crate::plan::lever::default_lora()), ..setup };
        let gpu = crate::plan::lever::GpuFacts::of(&crate::gpu::resolve("rtx-3080").unwrap());
        let qlora = TrainSetup {
            quantization: Some(crate::plan::lever::default_qlora(&gpu)),
            ..lora.clone()
        };
        let ratio =
            step_seconds(&facts, &qlora, 1e6, &rates) / step_seconds(&facts, &lora, 1e6, &rates);
        assert!((ratio - QLORA_FACTOR).abs() < 1e-9, "{ratio}");
    }

    #[test]
    fn eight_bit_adamw_speeds_small_models_up_and_slows_large_ones_down() {
        assert!((eight_bit_factor(124e6) - 41.9 / 43.6).abs() < 1e-12);
        assert!(eight_bit_factor(1.5e9) > 41.9 / 43.6 && eight_bit_factor(1.5e9) < 3200.0 / 3000.0);
        assert!((eight_bit_factor(70e9) - 3200.0 / 3000.0).abs() < 1e-12);
    }

    #[test]
    fn the_near_limit_penalty_ramps_from_92_to_97_percent_of_the_card() {
        assert_eq!(near_limit_penalty(0.90), 0.0);
        assert!((near_limit_penalty(0.945) - NEAR_LIMIT_PENALTY / 2.0).abs() < 1e-12);
        assert!((near_limit_penalty(0.99) - NEAR_LIMIT_PENALTY).abs() < 1e-12);
    }

    #[test]
    fn offload_is_bounded_by_the_slower_of_pcie_and_cpu_adam() {
        let adam = CPU_ADAM_PARAMS_PER_S as u64;
        assert!((offload_step_seconds(adam, 0) - 1.0).abs() < 1e-6);
        assert!((offload_step_seconds(0, 55_400_000_000) - 1.0).abs() < 1e-12);
    }

    fn on(strategy: crate::parallel::Strategy, gpus: u64) -> TrainSetup {
        let mut s = TrainSetup::default();
        s.parallel.gpus_per_node = gpus;
        s.parallel.strategy = strategy;
        s
    }

    #[test]
    fn zero3_moves_one_and_a_half_times_ddps_bytes_and_one_gpu_moves_none() {
        use crate::parallel::Strategy;
        let link = collective_bytes_per_second(None, 1);
        let t = |s: Strategy, k: f64| communication_seconds(&on(s, 8), 1e9, 1e9, k, link);
        assert!(
            (t(Strategy::Zero3, 1.0) / t(Strategy::Ddp, 1.0) - ZERO3_COMMUNICATION).abs() < 1e-9
        );
        assert_eq!(t(Strategy::Zero1, 1.0), t(Strategy::Ddp, 1.0));
        assert_eq!(t(Strategy::Fsdp, 1.0), t(Strategy::Zero3, 1.0));
        // Accumulation: DDP reduces once per step, ZeRO-3 gathers in every micro-batch.
        assert_eq!(t(Strategy::Ddp, 4.0), t(Strategy::Ddp, 1.0));
        assert!((t(Strategy::Zero3, 4.0) / t(Strategy::Zero3, 1.0) - 4.0).abs() < 1e-9);
        assert_eq!(communication_seconds(&on(Strategy::Zero3, 1), 1e9, 1e9, 1.0, link), 0.0);
        // NVLink is faster than PCIe; the network between nodes bounds both.
        assert!(collective_bytes_per_second(Some(450.0), 1) > link);
        assert_eq!(
            collective_bytes_per_second(Some(450.0), 2),
            collective_bytes_per_second(None, 2)
        );
    }

    #[test]
    fn collectives_hide_behind_compute_until_they_take_longer() {
        use crate::parallel::Strategy;
        let spec = ModelSpec::from_hf_config(crate::catalog::config_json("llama-3.1-8b").unwrap())
            .unwrap();
        let facts = ModelFacts::of(&spec);
        let at = |s: Strategy, micro: u64, nvlink: Option<f64>| {
            let rates = Rates::with_links(Some((29.8, 59.5)), nvlink);
            let mut setup = TrainSetup { micro_batch: micro, ..on(s, 8) };
            setup.seq_len = 512;
            step_seconds(&facts, &setup, facts.parameters, &rates)
        };
        // Large micro-batches: compute dominates, ZeRO-3 costs what DDP does.
        assert_eq!(at(Strategy::Zero3, 64, None), at(Strategy::Ddp, 64, None));
        // One sequence per GPU over PCIe: 8 B parameters gathered twice take longer than the
        // compute; over NVLink they hide again.
        assert!(at(Strategy::Zero3, 1, None) > at(Strategy::Ddp, 1, None));
        assert_eq!(at(Strategy::Zero3, 1, Some(450.0)), at(Strategy::Ddp, 1, Some(450.0)));
    }
}
