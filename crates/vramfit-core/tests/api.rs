//! The public API: bad input gives one-line errors naming the field, the seed article's
//! numbers come out, and the searches behave.

use vramfit_core::{
    Bytes, DType, EstimateError, ModelSpec, Optimizer, Phase, Precision, TrainSetup, Warning,
    catalog, estimate, max_micro_batch, model_states_for_params, parse_count,
};

fn spec(name: &str) -> ModelSpec {
    ModelSpec::from_hf_config(catalog::config_json(name).expect("catalog")).expect("parses")
}

#[track_caller]
fn check_config_error(json: &str, expected: &str) {
    let err = ModelSpec::from_hf_config(json).expect_err("must be rejected");
    let message = err.to_string();
    assert_eq!(message, expected);
    assert!(!message.contains('\n'));
}

const LLAMA: &str = r#"{"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 11008}"#;

#[test]
fn a_minimal_config_resolves_with_explicit_defaults() {
    let s = ModelSpec::from_hf_config(LLAMA).unwrap();
    assert_eq!(s.n_kv_heads, 32);
    assert_eq!(s.head_dim, 128);
    assert!(!s.tied_embeddings);
    assert_eq!(s.parameter_count(), 6_738_415_616);
}

#[test]
fn gpt2_aliases_are_read() {
    let s = spec("gpt2");
    assert_eq!((s.hidden_size, s.n_layers, s.n_heads, s.intermediate_size), (768, 12, 12, 3072));
    assert_eq!(s.attention_dropout, 0.1);
    assert!(s.tied_embeddings);
}

/// The mixture-of-experts fields each architecture resolves (transformers 5.24's config
/// classes and modules).
#[test]
fn moe_configs_resolve_their_experts() {
    let fields = |name: &str| {
        let s = spec(name);
        let m = s.moe.expect("an MoE model");
        let moe = (
            m.experts,
            m.top_k,
            m.expert_intermediate_size,
            m.norm_topk_prob,
            m.weights_in_logits_dtype,
            m.shared_expert_intermediate_size,
        );
        (moe, s.qkv_bias, s.o_bias, s.qk_norm, s.head_dim, s.dense_mlp_layers)
    };
    assert_eq!(
        fields("mixtral-8x7b"),
        ((8, 2, 14336, true, false, None), false, false, false, 128, vec![])
    );
    assert_eq!(
        fields("qwen1.5-moe-a2.7b"),
        ((60, 4, 1408, false, true, Some(5632)), true, false, false, 128, vec![])
    );
    assert_eq!(
        fields("qwen3-30b-a3b"),
        ((128, 8, 768, true, true, None), false, false, true, 128, vec![])
    );
    assert!(spec("llama-3.2-1b").moe.is_none());
}

#[test]
fn bad_configs_get_one_line_errors_naming_the_field() {
    check_config_error(
        "{\"model_type\": \"llama\",",
        "config.json is not valid JSON at line 1 column 23: EOF while parsing a value",
    );
    check_config_error("[1, 2]", "config.json must be a JSON object");
    check_config_error("{}", "config.json lacks the field 'model_type'");
    check_config_error(
        r#"{"model_type": "mamba"}"#,
        "unknown model_type 'mamba' (supported: llama, mistral, mixtral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, gpt2, gpt_neox, bert, roberta, olmo2, qwen2_moe, qwen3_moe, modernbert, deepseek_v2, deepseek_v3, t5, mt5)",
    );
    check_config_error(
        &LLAMA.replace("\"vocab_size\": 32000,", ""),
        "config.json lacks the field 'vocab_size'",
    );
    check_config_error(
        &LLAMA.replace("32000", "1000000000000000"),
        "field 'vocab_size' = 1000000000000000 is out of range (1..=16777216)",
    );
    check_config_error(
        &LLAMA.replace("\"num_hidden_layers\": 32", "\"num_hidden_layers\": 0"),
        "field 'num_hidden_layers' = 0 is out of range (1..=4096)",
    );
    check_config_error(
        &LLAMA.replace("\"num_attention_heads\": 32", "\"num_attention_heads\": 30"),
        "field 'num_attention_heads' = 30 does not divide hidden_size = 4096",
    );
    check_config_error(
        &LLAMA.replace("32000", "\"many\""),
        "field 'vocab_size' must be a non-negative integer",
    );
    let qwen_moe = catalog::config_json("qwen3-30b-a3b").unwrap();
    check_config_error(
        &qwen_moe.replace("\"mlp_only_layers\": []", "\"mlp_only_layers\": 3"),
        "field 'mlp_only_layers' must be a list of non-negative integers",
    );
    check_config_error(
        &qwen_moe.replace("\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 0"),
        "field 'decoder_sparse_step' = 0 is out of range (1..=4096)",
    );
    check_config_error(
        &qwen_moe.replace("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 129"),
        "field 'num_experts_per_tok' = 129 is out of range (1..=128)",
    );
    check_config_error(
        &LLAMA
            .replace("\"hidden_size\": 4096", "\"hidden_size\": 4096, \"hidden_act\": \"swiglu9\""),
        "field 'hidden_act' = 'swiglu9' is not a supported activation (silu, gelu, gelu_new, gelu_pytorch_tanh, relu)",
    );
    check_config_error(
        &LLAMA.replace(
            "\"num_attention_heads\": 32",
            "\"num_attention_heads\": 32, \"num_key_value_heads\": 5",
        ),
        "field 'num_key_value_heads' = 5 does not divide num_attention_heads = 32",
    );
}

fn gib(b: Bytes) -> String {
    format!("{:.2}", b.gib())
}

#[test]
fn the_articles_table_comes_out() {
    // bf16 weights and gradients, Adam with fp32 states (8 B/param) or 8-bit states (2 B/param).
    let adam = TrainSetup {
        precision: Precision::Bf16,
        optimizer: Optimizer::Adam,
        optimizer_state_dtype: Some(DType::F32),
        ..TrainSetup::default()
    };
    let adam8 = TrainSetup { optimizer_state_dtype: Some(DType::U8), ..adam.clone() };
    for (count, full, eight) in
        [("125M", "1.40", "0.70"), ("1B", "11.18", "5.59"), ("7B", "78.23", "39.12")]
    {
        let n = parse_count(count).unwrap();
        assert_eq!(gib(model_states_for_params(n, &adam).unwrap().total), full, "{count}");
        assert_eq!(gib(model_states_for_params(n, &adam8).unwrap().total), eight, "{count}");
    }
}

#[test]
fn bitsandbytes_8bit_adds_blockwise_absmax() {
    let setup = TrainSetup {
        precision: Precision::Bf16,
        optimizer: Optimizer::Adamw8bit,
        ..TrainSetup::default()
    };
    let states = model_states_for_params(1 << 30, &setup).unwrap();
    // 2 B of uint8 state + 2 × 4 B of absmax per 256 elements = 2.03125 B/param.
    assert_eq!(states.optimizer_state, Bytes((1u64 << 30) * 203_125 / 100_000));
}

#[test]
fn mixed_precision_adam_is_sixteen_bytes_per_parameter() {
    let setup = TrainSetup {
        precision: Precision::Bf16Mixed,
        optimizer: Optimizer::Adamw,
        ..TrainSetup::default()
    };
    let states = model_states_for_params(1_000_000_000, &setup).unwrap();
    assert_eq!(states.total, Bytes(16_000_000_000));
}

#[test]
fn absurd_setups_are_errors_not_panics() {
    let s = spec("llama-3.2-1b");
    for (setup, field) in [
        (TrainSetup { micro_batch: 0, ..TrainSetup::default() }, "batch"),
        (TrainSetup { seq_len: 0, ..TrainSetup::default() }, "seq-len"),
        (TrainSetup { seq_len: 1 << 40, ..TrainSetup::default() }, "seq-len"),
        (TrainSetup { grad_accum: 0, ..TrainSetup::default() }, "grad-accum"),
    ] {
        match estimate(&s, &setup) {
            Err(EstimateError::OutOfRange { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert_eq!(
        model_states_for_params(0, &TrainSetup::default()),
        Err(EstimateError::NoParameters)
    );
    assert_eq!(
        model_states_for_params(u64::MAX, &TrainSetup::default()),
        Err(EstimateError::Overflow)
    );
}

#[test]
fn a_huge_but_valid_setup_overflows_cleanly_or_estimates() {
    let s = spec("llama-3.1-70b");
    let setup = TrainSetup { micro_batch: 1 << 20, seq_len: 1 << 24, ..TrainSetup::default() };
    assert_eq!(estimate(&s, &setup), Err(EstimateError::Overflow));
}

#[test]
fn the_step_has_a_peak_phase_and_consistent_breakdown() {
    let e = estimate(&spec("llama-3.2-1b"), &TrainSetup::default()).unwrap();
    assert_eq!(e.components_at_peak.total(), e.peak_allocated);
    assert!(e.model_states < e.peak_allocated);
    // The peak falls in the phase whose own peak it is.
    let (_, in_phase) =
        e.phase_peaks.entries().into_iter().find(|(n, _)| *n == e.peak_phase.name()).unwrap();
    assert_eq!(in_phase, e.peak_allocated);
    // One sequence of 512 tokens: the optimizer step's foreach temporaries (an fp32 copy of
    // every parameter) outweigh the activations.
    assert_eq!(e.peak_phase, Phase::OptimizerStep);
    let pp = e.phase_peaks;
    let max = pp.forward.max(pp.loss).max(pp.backward).max(pp.optimizer_step);
    assert_eq!(max, e.peak_allocated);
}

#[test]
fn max_micro_batch_is_the_largest_that_fits() {
    let s = spec("gpt2");
    let setup = TrainSetup { seq_len: 1024, ..TrainSetup::default() };
    let capacity = Bytes(10 << 30);
    let b = max_micro_batch(&s, &setup, capacity).unwrap();
    assert!(b > 0);
    let at =
        |b| estimate(&s, &TrainSetup { micro_batch: b, ..setup.clone() }).unwrap().peak_allocated;
    assert!(at(b) <= capacity);
    assert!(at(b + 1) > capacity);
    assert_eq!(max_micro_batch(&s, &setup, Bytes(1 << 20)).unwrap(), 0);
}

#[test]
fn warnings_name_the_caveats() {
    let s = spec("gpt2");
    let fp16 = TrainSetup { precision: Precision::Fp16Mixed, ..TrainSetup::default() };
    assert_eq!(estimate(&s, &fp16).unwrap().warnings, [Warning::Fp16NeedsGradScaler]);
    let long = TrainSetup { seq_len: 4096, ..TrainSetup::default() };
    let w = estimate(&s, &long).unwrap().warnings;
    assert_eq!(w, [Warning::SequenceBeyondPositions { seq_len: 4096, max_positions: 1024 }]);
    assert!(w[0].to_string().contains("1024 learned positions"));
}

#[test]
fn every_truncation_of_every_catalog_config_is_an_error_not_a_panic() {
    for name in catalog::names() {
        let json = catalog::config_json(name).unwrap().trim_end();
        // Every prefix that stops before the closing brace.
        for end in (0..json.len()).filter(|&i| json.is_char_boundary(i)) {
            let Err(e) = ModelSpec::from_hf_config(&json[..end]) else {
                panic!("{name}: a truncated config parsed at {end}");
            };
            assert!(!e.to_string().contains('\n'));
        }
    }
}

#[test]
fn every_catalog_model_estimates_on_every_precision() {
    for name in catalog::names() {
        let s = spec(name);
        // Encoder-decoder models (T5) are modelled with eager attention only.
        let attention = if s.is_encoder_decoder() {
            vramfit_core::Attention::Eager
        } else {
            TrainSetup::default().attention
        };
        for precision in Precision::ALL {
            let setup = TrainSetup { precision, seq_len: 256, attention, ..TrainSetup::default() };
            let e = estimate(&s, &setup).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert!(e.peak_allocated > e.model_states_detail.parameters, "{name}");
        }
    }
}

#[test]
fn gemma3_resolves_its_local_and_global_layers() {
    use vramfit_core::model::{SlidingWindow, Task};
    let s = spec("gemma-3-1b-it");
    assert_eq!(s.parameter_count(), 999_885_952);
    assert!(s.qk_norm && !s.qk_norm_full_width && s.sandwich_norm && s.tied_embeddings);
    assert_eq!((s.attn_softcap, s.final_softcap), (None, None));
    assert_eq!(
        s.sliding_window,
        Some(SlidingWindow { window: 512, local_layers: 22, global_layers: 4 })
    );
    assert_eq!(s.rotary_tables, 2);
    // Fewer layers than the pattern: all local, one rotary table.
    let json = catalog::config_json("gemma-3-1b-it")
        .unwrap()
        .replace("\"num_hidden_layers\": 26", "\"num_hidden_layers\": 5");
    let five = ModelSpec::from_hf_config(&json).unwrap();
    assert_eq!(five.rotary_tables, 1);
    assert_eq!(five.sliding_window.map(|w| w.local_layers), Some(5));
    // `layer_types`, when given, decides; a kind transformers does not know is an error.
    let typed = json.replace(
        "\"sliding_window_pattern\": 6,",
        "\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\"],",
    );
    let typed = ModelSpec::from_hf_config(&typed).unwrap();
    assert_eq!((typed.rotary_tables, typed.sliding_window), (1, None));
    check_config_error(
        &json.replace("\"sliding_window_pattern\": 6,", "\"layer_types\": [\"local\"],"),
        "field 'layer_types' must be a list of 'sliding_attention' or 'full_attention', one per layer",
    );
    // transformers has no Gemma3ForTokenClassification.
    assert!(s.for_task(Task::TokenCls, 2).is_err());
    assert!(s.for_task(Task::SeqCls, 2).is_ok());
}
