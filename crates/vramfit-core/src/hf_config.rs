//! The raw mirror of a Hugging Face `config.json`: every field optional, aliases accepted.
//!
//! [`RawConfig::parse`] only reads JSON; it takes no decision. Defaults, validation and the
//! architecture rules live in one place, [`crate::model::ModelSpec::resolve`]. Every field is
//! read by name so that a wrong type is reported with the field's name.

use serde_json::{Map, Value};

use crate::model::ConfigError;

/// The largest `config.json` accepted (a real one is a few KiB; this guards against being
/// handed a weights file by mistake).
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// The fields of `config.json` that matter for memory, as written (aliases folded).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawConfig {
    /// `model_type`.
    pub model_type: Option<String>,
    /// `vocab_size`.
    pub vocab_size: Option<u64>,
    /// `hidden_size` / `n_embd` / `d_model`.
    pub hidden_size: Option<u64>,
    /// `num_hidden_layers` / `n_layer` / `num_layers`.
    pub num_hidden_layers: Option<u64>,
    /// `num_attention_heads` / `n_head` / `num_heads` (T5).
    pub num_attention_heads: Option<u64>,
    /// `num_key_value_heads`.
    pub num_key_value_heads: Option<u64>,
    /// `head_dim` / `d_kv` (T5).
    pub head_dim: Option<u64>,
    /// `intermediate_size` / `n_inner` / `ffn_dim` / `d_ff` (T5).
    pub intermediate_size: Option<u64>,
    /// `hidden_act` / `activation_function`.
    pub hidden_act: Option<String>,
    /// `hidden_activation` (Gemma 2).
    pub hidden_activation: Option<String>,
    /// `max_position_embeddings` / `n_positions`.
    pub max_position_embeddings: Option<u64>,
    /// `tie_word_embeddings`.
    pub tie_word_embeddings: Option<bool>,
    /// `attention_bias`.
    pub attention_bias: Option<bool>,
    /// `mlp_bias`.
    pub mlp_bias: Option<bool>,
    /// `num_local_experts` / `num_experts` / `n_routed_experts` (DeepSeek).
    pub num_local_experts: Option<u64>,
    /// `num_experts_per_tok`.
    pub num_experts_per_tok: Option<u64>,
    /// `moe_intermediate_size` (Qwen-MoE: one expert's width).
    pub moe_intermediate_size: Option<u64>,
    /// `shared_expert_intermediate_size` (Qwen2-MoE).
    pub shared_expert_intermediate_size: Option<u64>,
    /// `norm_topk_prob` (Qwen-MoE).
    pub norm_topk_prob: Option<bool>,
    /// `decoder_sparse_step` (Qwen-MoE: every n-th layer is sparse).
    pub decoder_sparse_step: Option<u64>,
    /// `mlp_only_layers` (Qwen-MoE: layers with the dense MLP).
    pub mlp_only_layers: Option<Vec<u64>>,
    /// `qkv_bias` (Qwen2-MoE).
    pub qkv_bias: Option<bool>,
    /// `attention_dropout` / `attention_probs_dropout_prob` / `attn_pdrop` / `dropout_rate`
    /// (T5's one dropout).
    pub attention_dropout: Option<f64>,
    /// `hidden_dropout_prob` / `resid_pdrop` / `hidden_dropout` / `dropout_rate` (T5).
    pub hidden_dropout: Option<f64>,
    /// `embd_pdrop` (GPT-2, Phi-3) / `embedding_dropout` (ModernBERT).
    pub embedding_dropout: Option<f64>,
    /// `rotary_pct` / `partial_rotary_factor`.
    pub rotary_pct: Option<f64>,
    /// `use_parallel_residual` (GPT-NeoX).
    pub use_parallel_residual: Option<bool>,
    /// `type_vocab_size` (BERT, RoBERTa).
    pub type_vocab_size: Option<u64>,
    /// `attn_logit_softcapping` (Gemma 2).
    pub attn_logit_softcapping: Option<f64>,
    /// `final_logit_softcapping` (Gemma 2).
    pub final_logit_softcapping: Option<f64>,
    /// `sliding_window` (Gemma 3: the local layers' window).
    pub sliding_window: Option<u64>,
    /// `sliding_window_pattern` (Gemma 3: every n-th layer is global).
    pub sliding_window_pattern: Option<u64>,
    /// `layer_types` (Gemma 3: `sliding_attention` / `full_attention` per layer).
    pub layer_types: Option<Vec<String>>,
    /// `use_cache`.
    pub use_cache: Option<bool>,
    /// `classifier_dropout` (classification heads).
    pub classifier_dropout: Option<f64>,
    /// `norm_bias` (ModernBERT: its LayerNorms' bias).
    pub norm_bias: Option<bool>,
    /// `decoder_bias` (ModernBERT: the masked-LM decoder's bias).
    pub decoder_bias: Option<bool>,
    /// `classifier_bias` (ModernBERT: the prediction head's dense bias).
    pub classifier_bias: Option<bool>,
    /// `classifier_pooling` (ModernBERT's sequence classifier: `"cls"` or `"mean"`).
    pub classifier_pooling: Option<String>,
    /// `global_attn_every_n_layers` (ModernBERT: layers `0, n, 2n, ...` attend globally, the
    /// others within a sliding window).
    pub global_attn_every_n_layers: Option<u64>,
    /// `q_lora_rank` (DeepSeek: the query's low-rank width; `null` for a plain `q_proj`).
    pub q_lora_rank: Option<u64>,
    /// `q_lora_rank` is written as `null` (DeepSeek: a plain `q_proj`, not the class default).
    pub q_lora_rank_null: bool,
    /// `kv_lora_rank` (DeepSeek: the compressed key/value latent's width).
    pub kv_lora_rank: Option<u64>,
    /// `qk_nope_head_dim` (DeepSeek: the part of a query/key head without rotary).
    pub qk_nope_head_dim: Option<u64>,
    /// `qk_rope_head_dim` (DeepSeek: the rotary part of a query/key head).
    pub qk_rope_head_dim: Option<u64>,
    /// `v_head_dim` (DeepSeek: a value head's width).
    pub v_head_dim: Option<u64>,
    /// `n_shared_experts` (DeepSeek: shared experts, each `moe_intermediate_size` wide).
    pub n_shared_experts: Option<u64>,
    /// `first_k_dense_replace` (DeepSeek: the first k layers have the dense MLP).
    pub first_k_dense_replace: Option<u64>,
    /// `n_group` (DeepSeek: expert groups of the group-limited routing).
    pub n_group: Option<u64>,
    /// `topk_group` (DeepSeek: groups each token may use).
    pub topk_group: Option<u64>,
    /// `topk_method` (DeepSeek-V2: `greedy` or `group_limited_greedy`).
    pub topk_method: Option<String>,
    /// `rope_interleave` (DeepSeek-V3: interleaved rotary pairs).
    pub rope_interleave: Option<bool>,
    /// `quantization_config.quant_method` (DeepSeek-V3's checkpoint: `fp8`).
    pub quant_method: Option<String>,
    /// `num_decoder_layers` (T5: the decoder stack's layers, default `num_layers`).
    pub num_decoder_layers: Option<u64>,
    /// `feed_forward_proj` (T5: `relu`, `gated-gelu`, `ACT` or `gated-ACT`).
    pub feed_forward_proj: Option<String>,
    /// `relative_attention_num_buckets` (T5).
    pub relative_attention_num_buckets: Option<u64>,
}

fn field<'a>(
    map: &'a Map<String, Value>,
    names: &[&'static str],
) -> Option<(&'static str, &'a Value)> {
    names.iter().find_map(|n| match map.get(*n) {
        None | Some(Value::Null) => None,
        Some(v) => Some((*n, v)),
    })
}

fn uint(map: &Map<String, Value>, names: &[&'static str]) -> Result<Option<u64>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    // Some configs write integers as floats (`4096.0`); accept exact integral values only.
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => Ok(Some(f as u64)),
        _ => Err(ConfigError::WrongType { field: name, expected: "a non-negative integer" }),
    }
}

fn uint_list(
    map: &Map<String, Value>,
    names: &[&'static str],
) -> Result<Option<Vec<u64>>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    let wrong = ConfigError::WrongType { field: name, expected: "a list of non-negative integers" };
    let Value::Array(items) = v else { return Err(wrong) };
    items.iter().map(|i| i.as_u64().ok_or(wrong.clone())).collect::<Result<_, _>>().map(Some)
}

fn string_list(
    map: &Map<String, Value>,
    names: &[&'static str],
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    let wrong = ConfigError::WrongType { field: name, expected: "a list of strings" };
    let Value::Array(items) = v else { return Err(wrong) };
    items
        .iter()
        .map(|i| i.as_str().map(str::to_string).ok_or(wrong.clone()))
        .collect::<Result<_, _>>()
        .map(Some)
}

fn float(map: &Map<String, Value>, names: &[&'static str]) -> Result<Option<f64>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    v.as_f64().map(Some).ok_or(ConfigError::WrongType { field: name, expected: "a number" })
}

fn boolean(map: &Map<String, Value>, names: &[&'static str]) -> Result<Option<bool>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    v.as_bool().map(Some).ok_or(ConfigError::WrongType { field: name, expected: "true or false" })
}

fn string(map: &Map<String, Value>, names: &[&'static str]) -> Result<Option<String>, ConfigError> {
    let Some((name, v)) = field(map, names) else { return Ok(None) };
    v.as_str()
        .map(|s| Some(s.to_string()))
        .ok_or(ConfigError::WrongType { field: name, expected: "a string" })
}

impl RawConfig {
    /// Reads the JSON text of a `config.json`.
    pub fn parse(json: &str) -> Result<RawConfig, ConfigError> {
        if json.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge { bytes: json.len() as u64 });
        }
        let value: Value = serde_json::from_str(json).map_err(|e| ConfigError::Json {
            line: e.line() as u64,
            column: e.column() as u64,
            message: e.to_string().split(" at line ").next().unwrap_or_default().to_string(),
        })?;
        let Value::Object(map) = value else {
            return Err(ConfigError::NotAnObject);
        };
        let map = &map;
        Ok(RawConfig {
            model_type: string(map, &["model_type"])?,
            vocab_size: uint(map, &["vocab_size"])?,
            hidden_size: uint(map, &["hidden_size", "n_embd", "d_model"])?,
            num_hidden_layers: uint(map, &["num_hidden_layers", "n_layer", "num_layers"])?,
            num_attention_heads: uint(map, &["num_attention_heads", "n_head", "num_heads"])?,
            num_key_value_heads: uint(map, &["num_key_value_heads"])?,
            head_dim: uint(map, &["head_dim", "d_kv"])?,
            intermediate_size: uint(map, &["intermediate_size", "n_inner", "ffn_dim", "d_ff"])?,
            hidden_act: string(map, &["hidden_act", "activation_function"])?,
            hidden_activation: string(map, &["hidden_activation"])?,
            max_position_embeddings: uint(map, &["max_position_embeddings", "n_positions"])?,
            tie_word_embeddings: boolean(map, &["tie_word_embeddings"])?,
            attention_bias: boolean(map, &["attention_bias"])?,
            mlp_bias: boolean(map, &["mlp_bias"])?,
            num_local_experts: uint(
                map,
                &["num_local_experts", "num_experts", "n_routed_experts"],
            )?,
            num_experts_per_tok: uint(map, &["num_experts_per_tok"])?,
            moe_intermediate_size: uint(map, &["moe_intermediate_size"])?,
            shared_expert_intermediate_size: uint(map, &["shared_expert_intermediate_size"])?,
            norm_topk_prob: boolean(map, &["norm_topk_prob"])?,
            decoder_sparse_step: uint(map, &["decoder_sparse_step"])?,
            mlp_only_layers: uint_list(map, &["mlp_only_layers"])?,
            qkv_bias: boolean(map, &["qkv_bias"])?,
            attention_dropout: float(
                map,
                &[
                    "attention_dropout",
                    "attention_probs_dropout_prob",
                    "attn_pdrop",
                    "dropout_rate",
                ],
            )?,
            hidden_dropout: float(
                map,
                &["hidden_dropout_prob", "resid_pdrop", "hidden_dropout", "dropout_rate"],
            )?,
            embedding_dropout: float(map, &["embd_pdrop", "embedding_dropout"])?,
            rotary_pct: float(map, &["rotary_pct", "partial_rotary_factor"])?,
            use_parallel_residual: boolean(map, &["use_parallel_residual"])?,
            type_vocab_size: uint(map, &["type_vocab_size"])?,
            attn_logit_softcapping: float(map, &["attn_logit_softcapping"])?,
            final_logit_softcapping: float(map, &["final_logit_softcapping"])?,
            sliding_window: uint(map, &["sliding_window"])?,
            sliding_window_pattern: uint(
                map,
                &["sliding_window_pattern", "_sliding_window_pattern"],
            )?,
            layer_types: string_list(map, &["layer_types"])?,
            use_cache: boolean(map, &["use_cache"])?,
            classifier_dropout: float(map, &["classifier_dropout"])?,
            norm_bias: boolean(map, &["norm_bias"])?,
            decoder_bias: boolean(map, &["decoder_bias"])?,
            classifier_bias: boolean(map, &["classifier_bias"])?,
            classifier_pooling: string(map, &["classifier_pooling"])?,
            global_attn_every_n_layers: uint(map, &["global_attn_every_n_layers"])?,
            q_lora_rank: uint(map, &["q_lora_rank"])?,
            q_lora_rank_null: map.get("q_lora_rank") == Some(&Value::Null),
            kv_lora_rank: uint(map, &["kv_lora_rank"])?,
            qk_nope_head_dim: uint(map, &["qk_nope_head_dim"])?,
            qk_rope_head_dim: uint(map, &["qk_rope_head_dim"])?,
            v_head_dim: uint(map, &["v_head_dim"])?,
            n_shared_experts: uint(map, &["n_shared_experts"])?,
            first_k_dense_replace: uint(map, &["first_k_dense_replace"])?,
            n_group: uint(map, &["n_group"])?,
            topk_group: uint(map, &["topk_group"])?,
            topk_method: string(map, &["topk_method"])?,
            rope_interleave: boolean(map, &["rope_interleave"])?,
            quant_method: match map.get("quantization_config") {
                Some(Value::Object(q)) => string(q, &["quant_method"])?,
                _ => None,
            },
            num_decoder_layers: uint(map, &["num_decoder_layers"])?,
            feed_forward_proj: string(map, &["feed_forward_proj"])?,
            relative_attention_num_buckets: uint(map, &["relative_attention_num_buckets"])?,
        })
    }
}
