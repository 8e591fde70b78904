//! A transformer described in a small TOML file, for models that have no `config.json` (your own
//! `nn.Module`): the sizes and a few choices, mapped onto an architecture vramfit simulates.
//!
//! [`parse`] reads the TOML text (no I/O: the binary reads the file), refuses unknown keys and
//! inconsistent sizes with an error naming the field, then builds the [`RawConfig`] that the
//! selected architecture's `config.json` would hold and resolves it with
//! [`ModelSpec::resolve`], so a TOML model is simulated exactly as that `config.json` is.
//!
//! ```toml
//! name = "my-model"          # optional: how outputs name it (default: the file name)
//! vocab_size = 50304
//! hidden_size = 768
//! layers = 12
//! heads = 12
//! kv_heads = 12              # optional, default heads (fewer: grouped-query attention)
//! head_dim = 64              # optional, default hidden_size / heads
//! ffn_size = 3072
//! ffn = "gelu"               # gelu, gelu-tanh, gelu-new, relu (an MLP) or swiglu (gated)
//! norm = "layernorm"         # layernorm or rmsnorm
//! positions = "learned"      # learned (a table of max_positions rows) or rotary
//! max_positions = 1024       # required for learned positions
//! tied_embeddings = true     # the output layer is the embedding matrix
//! bias = true                # biases on the linears
//! dropout = 0.1              # optional, default 0
//! ```
//!
//! Which architecture the fields select (`ffn`, `norm`, `positions`):
//!
//! | ffn | norm | positions | simulated as |
//! | --- | --- | --- | --- |
//! | an MLP (`gelu`, `gelu-tanh`, `gelu-new`, `relu`) | `layernorm` | `learned` | `gpt2` |
//! | an MLP | `layernorm` | `rotary` | `gpt_neox` (sequential residual, rotary over the whole head) |
//! | `swiglu` | `rmsnorm` | `rotary` | `llama` |
//!
//! Other combinations are refused: no architecture vramfit simulates has them. The `gpt2` and
//! `gpt_neox` layouts have a bias on every linear and no grouped-query attention, and their
//! heads are `hidden_size / heads` wide, so they need `bias = true`, `kv_heads = heads` and no
//! other `head_dim`. `dropout` is the probability of every dropout the architecture has: on the
//! embeddings (not `llama`), the attention probabilities and the two residual branches of each
//! layer. A TOML model builds no KV cache in training (`use_cache` false: a plain module has
//! none); `--use-cache true` asks for one.

use std::fmt;

use toml::{Table, Value};

use crate::gpu::edit_distance;
use crate::hf_config::RawConfig;
use crate::model::{
    ConfigError, MAX_HEADS, MAX_HIDDEN, MAX_INTERMEDIATE, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB,
    ModelSpec,
};

/// The largest model TOML accepted (a real one is a few hundred bytes).
pub const MAX_MODEL_TOML_BYTES: usize = 1 << 16;

/// The longest `name` accepted.
const MAX_NAME_CHARS: usize = 100;

/// The keys a model TOML may have, in the order the documentation lists them.
pub const KEYS: [&str; 15] = [
    "name",
    "vocab_size",
    "hidden_size",
    "layers",
    "heads",
    "kv_heads",
    "head_dim",
    "ffn_size",
    "ffn",
    "norm",
    "positions",
    "max_positions",
    "tied_embeddings",
    "bias",
    "dropout",
];

/// `config.json`'s names (and their aliases) for the keys above, for the "did you mean" of an
/// unknown key.
const CONFIG_NAMES: [(&str, &str); 14] = [
    ("num_hidden_layers", "layers"),
    ("n_layer", "layers"),
    ("num_attention_heads", "heads"),
    ("n_head", "heads"),
    ("num_key_value_heads", "kv_heads"),
    ("n_embd", "hidden_size"),
    ("d_model", "hidden_size"),
    ("intermediate_size", "ffn_size"),
    ("n_inner", "ffn_size"),
    ("max_position_embeddings", "max_positions"),
    ("n_positions", "max_positions"),
    ("tie_word_embeddings", "tied_embeddings"),
    ("hidden_act", "ffn"),
    ("activation_function", "ffn"),
];

/// The `ffn` choices.
const FFN_CHOICES: &str = "gelu, gelu-tanh, gelu-new, relu, swiglu";

/// A model read from TOML: its name, if the file gives one, and the resolved spec.
#[derive(Debug, Clone, PartialEq)]
pub struct TomlModel {
    /// `name`, if given.
    pub name: Option<String>,
    /// The spec, resolved as the selected architecture's `config.json` would be.
    pub spec: ModelSpec,
}

/// A model TOML that cannot be turned into a [`ModelSpec`]. Every variant names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelTomlError {
    /// Far larger than any model description.
    #[error("the file is {bytes} bytes, larger than any model description")]
    TooLarge {
        /// Its size.
        bytes: u64,
    },
    /// Not TOML.
    #[error("not valid TOML at line {line} column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What the TOML parser said.
        message: String,
    },
    /// A key this format does not have.
    #[error("unknown key '{key}'{}", suggestion.map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default())]
    UnknownKey {
        /// The key.
        key: String,
        /// The key it probably means.
        suggestion: Option<&'static str>,
    },
    /// A required key is absent.
    #[error("the key '{field}' is missing")]
    Missing {
        /// The key.
        field: &'static str,
    },
    /// A value of the wrong type.
    #[error("'{field}' must be {expected}")]
    WrongType {
        /// The key.
        field: &'static str,
        /// What it should be.
        expected: &'static str,
    },
    /// A value outside what any model uses.
    #[error("'{field}' = {value} is out of range ({min}..={max})")]
    OutOfRange {
        /// The key.
        field: &'static str,
        /// The value given.
        value: String,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// A probability outside `[0, 1)`.
    #[error("'{field}' = {value} is not a probability below 1")]
    NotAProbability {
        /// The key.
        field: &'static str,
        /// The value given.
        value: String,
    },
    /// Two sizes that must divide do not.
    #[error("'{field}' = {value} does not divide '{other}' = {other_value}")]
    NotDivisible {
        /// The divisor.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The dividend.
        other: &'static str,
        /// Its value.
        other_value: u64,
    },
    /// A string that is not one of the choices.
    #[error("'{field}' = '{given}' is not one of: {expected}")]
    UnknownChoice {
        /// The key.
        field: &'static str,
        /// The value given.
        given: String,
        /// The choices, comma separated.
        expected: &'static str,
    },
    /// `ffn`, `norm` and `positions` select no architecture vramfit simulates.
    #[error(
        "ffn = '{ffn}', norm = '{norm}', positions = '{positions}' is no architecture vramfit simulates"
    )]
    NoArchitecture {
        /// `ffn`.
        ffn: String,
        /// `norm`.
        norm: String,
        /// `positions`.
        positions: String,
    },
    /// A value the selected architecture cannot have.
    #[error("'{field}' = {value}: the {architecture} layout {reason}")]
    NotInArchitecture {
        /// The key.
        field: &'static str,
        /// The value given.
        value: String,
        /// The architecture the other fields selected.
        architecture: &'static str,
        /// Why it cannot.
        reason: &'static str,
    },
    /// The parameter count overflows 64 bits.
    #[error("the model's parameter count overflows 64 bits")]
    Overflow,
}

/// The architectures a model TOML maps onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selected {
    Gpt2,
    GptNeox,
    Llama,
}

impl Selected {
    fn model_type(self) -> &'static str {
        match self {
            Selected::Gpt2 => "gpt2",
            Selected::GptNeox => "gpt_neox",
            Selected::Llama => "llama",
        }
    }
}

impl fmt::Display for Selected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.model_type())
    }
}

/// Reads a model TOML and resolves it.
pub fn parse(text: &str) -> Result<TomlModel, ModelTomlError> {
    if text.len() > MAX_MODEL_TOML_BYTES {
        return Err(ModelTomlError::TooLarge { bytes: text.len() as u64 });
    }
    let table: Table = toml::from_str(text).map_err(|e| {
        let (line, column) = e.span().map_or((1, 1), |span| line_column(text, span.start));
        ModelTomlError::Syntax { line, column, message: e.message().replace('\n', " ") }
    })?;
    let keys = Keys(&table);
    keys.refuse_unknown()?;
    let (raw, name) = keys.raw_config()?;
    let spec = ModelSpec::resolve(&raw).map_err(|e| match e {
        ConfigError::Overflow => ModelTomlError::Overflow,
        // Every value was checked above with the same limits, in the TOML's own names.
        other => unreachable!("a checked model TOML failed to resolve: {other}"),
    })?;
    Ok(TomlModel { name, spec })
}

/// 1-based line and column of a byte offset.
fn line_column(text: &str, offset: usize) -> (u64, u64) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line as u64, column as u64)
}

/// The table, read key by key so that every error names its key.
struct Keys<'a>(&'a Table);

impl Keys<'_> {
    fn refuse_unknown(&self) -> Result<(), ModelTomlError> {
        let Some(key) = self.0.keys().find(|k| !KEYS.contains(&k.as_str())) else {
            return Ok(());
        };
        let suggestion = CONFIG_NAMES
            .iter()
            .find(|(config, _)| *config == key.as_str())
            .map(|(_, ours)| *ours)
            .or_else(|| {
                KEYS.iter()
                    .map(|k| (edit_distance(&key.to_ascii_lowercase(), k), *k))
                    .filter(|(d, _)| *d <= 3)
                    .min()
                    .map(|(_, k)| k)
            });
        Err(ModelTomlError::UnknownKey { key: key.clone(), suggestion })
    }

    fn size(&self, field: &'static str, max: u64) -> Result<Option<u64>, ModelTomlError> {
        let Some(value) = self.0.get(field) else { return Ok(None) };
        let Value::Integer(n) = value else {
            return Err(ModelTomlError::WrongType { field, expected: "a positive integer" });
        };
        match u64::try_from(*n) {
            Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
            _ => Err(ModelTomlError::OutOfRange { field, value: n.to_string(), min: 1, max }),
        }
    }

    fn required_size(&self, field: &'static str, max: u64) -> Result<u64, ModelTomlError> {
        self.size(field, max)?.ok_or(ModelTomlError::Missing { field })
    }

    fn string(&self, field: &'static str) -> Result<Option<&str>, ModelTomlError> {
        match self.0.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(ModelTomlError::WrongType { field, expected: "a string" }),
        }
    }

    fn required_string(&self, field: &'static str) -> Result<&str, ModelTomlError> {
        self.string(field)?.ok_or(ModelTomlError::Missing { field })
    }

    fn required_bool(&self, field: &'static str) -> Result<bool, ModelTomlError> {
        match self.0.get(field) {
            None => Err(ModelTomlError::Missing { field }),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(_) => Err(ModelTomlError::WrongType { field, expected: "true or false" }),
        }
    }

    fn probability(&self, field: &'static str) -> Result<f64, ModelTomlError> {
        let p = match self.0.get(field) {
            None => return Ok(0.0),
            Some(Value::Float(p)) => *p,
            // `dropout = 0` is an integer in TOML.
            Some(Value::Integer(0)) => 0.0,
            Some(_) => {
                return Err(ModelTomlError::WrongType {
                    field,
                    expected: "a probability such as 0.1",
                });
            }
        };
        if (0.0..1.0).contains(&p) {
            Ok(p)
        } else {
            Err(ModelTomlError::NotAProbability { field, value: p.to_string() })
        }
    }

    /// The `config.json` of the selected architecture that this TOML describes, and the name.
    fn raw_config(&self) -> Result<(RawConfig, Option<String>), ModelTomlError> {
        let name = self.string("name")?.map(str::to_string);
        if let Some(name) = &name
            && (name.trim().is_empty()
                || name.chars().count() > MAX_NAME_CHARS
                || name.chars().any(char::is_control))
        {
            return Err(ModelTomlError::WrongType {
                field: "name",
                expected: "a name of 1 to 100 characters on one line",
            });
        }
        let vocab_size = self.required_size("vocab_size", MAX_VOCAB)?;
        let hidden_size = self.required_size("hidden_size", MAX_HIDDEN)?;
        let layers = self.required_size("layers", MAX_LAYERS)?;
        let heads = self.required_size("heads", MAX_HEADS)?;
        let kv_heads = self.size("kv_heads", MAX_HEADS)?;
        let head_dim = self.size("head_dim", MAX_HIDDEN)?;
        let ffn_size = self.required_size("ffn_size", MAX_INTERMEDIATE)?;
        let ffn = self.required_string("ffn")?;
        let norm = self.required_string("norm")?;
        let positions = self.required_string("positions")?;
        let max_positions = self.size("max_positions", MAX_POSITIONS)?;
        let tied_embeddings = self.required_bool("tied_embeddings")?;
        let bias = self.required_bool("bias")?;
        let dropout = self.probability("dropout")?;

        // The activation as `config.json` names it; `None` for the gated SwiGLU.
        let activation = match ffn {
            "gelu" => Some("gelu"),
            "gelu-tanh" => Some("gelu_pytorch_tanh"),
            "gelu-new" => Some("gelu_new"),
            "relu" => Some("relu"),
            "swiglu" => None,
            _ => {
                return Err(ModelTomlError::UnknownChoice {
                    field: "ffn",
                    given: ffn.to_string(),
                    expected: FFN_CHOICES,
                });
            }
        };
        let rms = match norm {
            "layernorm" => false,
            "rmsnorm" => true,
            _ => {
                return Err(ModelTomlError::UnknownChoice {
                    field: "norm",
                    given: norm.to_string(),
                    expected: "layernorm, rmsnorm",
                });
            }
        };
        let rotary = match positions {
            "learned" => false,
            "rotary" => true,
            _ => {
                return Err(ModelTomlError::UnknownChoice {
                    field: "positions",
                    given: positions.to_string(),
                    expected: "learned, rotary",
                });
            }
        };
        let selected = match (activation.is_some(), rms, rotary) {
            (true, false, false) => Selected::Gpt2,
            (true, false, true) => Selected::GptNeox,
            (false, true, true) => Selected::Llama,
            _ => {
                return Err(ModelTomlError::NoArchitecture {
                    ffn: ffn.to_string(),
                    norm: norm.to_string(),
                    positions: positions.to_string(),
                });
            }
        };

        let kv_heads = kv_heads.unwrap_or(heads);
        if heads % kv_heads != 0 {
            return Err(ModelTomlError::NotDivisible {
                field: "kv_heads",
                value: kv_heads,
                other: "heads",
                other_value: heads,
            });
        }
        if head_dim.is_none() && hidden_size % heads != 0 {
            return Err(ModelTomlError::NotDivisible {
                field: "heads",
                value: heads,
                other: "hidden_size",
                other_value: hidden_size,
            });
        }
        if !rotary && max_positions.is_none() {
            return Err(ModelTomlError::Missing { field: "max_positions" });
        }
        if selected != Selected::Llama {
            let not_in = |field, value: String, reason| ModelTomlError::NotInArchitecture {
                field,
                value,
                architecture: selected.model_type(),
                reason,
            };
            if !bias {
                return Err(not_in(
                    "bias",
                    "false".into(),
                    "has a bias on every linear (layernorm, an MLP)",
                ));
            }
            if kv_heads != heads {
                return Err(not_in(
                    "kv_heads",
                    kv_heads.to_string(),
                    "has no grouped-query attention: kv_heads must equal heads",
                ));
            }
            if let Some(d) = head_dim
                && heads.checked_mul(d) != Some(hidden_size)
            {
                return Err(not_in(
                    "head_dim",
                    d.to_string(),
                    "has heads of hidden_size / heads: drop head_dim",
                ));
            }
        }
        let raw = RawConfig {
            model_type: Some(selected.model_type().to_string()),
            vocab_size: Some(vocab_size),
            hidden_size: Some(hidden_size),
            num_hidden_layers: Some(layers),
            num_attention_heads: Some(heads),
            num_key_value_heads: (selected == Selected::Llama).then_some(kv_heads),
            head_dim,
            intermediate_size: Some(ffn_size),
            hidden_act: Some(activation.unwrap_or("silu").to_string()),
            max_position_embeddings: max_positions,
            tie_word_embeddings: Some(tied_embeddings),
            attention_bias: Some(bias),
            mlp_bias: (selected == Selected::Llama).then_some(bias),
            attention_dropout: Some(dropout),
            hidden_dropout: Some(dropout),
            embedding_dropout: Some(dropout),
            rotary_pct: (selected == Selected::GptNeox).then_some(1.0),
            use_parallel_residual: (selected == Selected::GptNeox).then_some(false),
            // A plain module builds no `DynamicCache`.
            use_cache: Some(false),
            ..RawConfig::default()
        };
        Ok((raw, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    const STAPEL: &str = include_str!("../../../examples/stapel.toml");
    const GPT2: &str = include_str!("../../../examples/gpt2.toml");
    const LLAMA: &str = include_str!("../../../examples/llama-3.2-1b.toml");

    fn spec(text: &str) -> ModelSpec {
        parse(text).unwrap_or_else(|e| panic!("{e}")).spec
    }

    /// The catalog model's spec as a plain module runs it: without a KV cache.
    fn catalog_without_cache(name: &str) -> ModelSpec {
        let json = catalog::config_json(name).expect("a catalog model");
        let spec = ModelSpec::from_hf_config(json).expect("a valid config");
        ModelSpec { use_cache: Some(false), ..spec }
    }

    #[track_caller]
    fn check_error(text: &str, expected: &str) {
        match parse(text) {
            Ok(model) => panic!("accepted: {model:?}"),
            Err(e) => assert_eq!(e.to_string(), expected),
        }
    }

    /// `text` with the line starting `key =` replaced by `line` (removed when empty).
    fn with_line(text: &str, key: &str, line: &str) -> String {
        let mut out: Vec<&str> = Vec::new();
        let mut found = false;
        for l in text.lines() {
            if l.starts_with(&format!("{key} =")) {
                found = true;
                if !line.is_empty() {
                    out.push(line);
                }
            } else {
                out.push(l);
            }
        }
        if !found {
            out.push(line);
        }
        out.join("\n")
    }

    #[test]
    fn the_examples_resolve_as_their_config_json() {
        assert_eq!(spec(GPT2), catalog_without_cache("gpt2"));
        assert_eq!(spec(LLAMA), catalog_without_cache("llama-3.2-1b"));
        assert_eq!(parse(GPT2).unwrap().name.as_deref(), Some("gpt2-small"));
    }

    #[test]
    fn stapel_has_the_parameters_of_the_articles_class() {
        // validation/stapel_parameters.py builds the article's `Stapel` of these blocks with
        // torch and counts 1,011,572,736. By hand: 18 blocks of 12·h² + 13·h (h = 2048: two
        // LayerNorms, q/k/v and the output projection, the MLP's two linears, all with
        // biases), the token table 50304·h (tied to the output layer), the position table
        // 1024·h and the final LayerNorm 2·h.
        let h: u64 = 2048;
        let by_hand = 18 * (12 * h * h + 13 * h) + 50304 * h + 1024 * h + 2 * h;
        assert_eq!(by_hand, 1_011_572_736);
        let stapel = spec(STAPEL);
        assert_eq!(stapel.parameter_count(), by_hand);
        assert_eq!(stapel.architecture, crate::Architecture::Gpt2);
    }

    #[test]
    fn stapel_resolves_as_the_oracle_cases_config() {
        // validation/cases.json runs the Stapel as gpt2 with these overrides.
        let json = catalog::config_json("gpt2").unwrap();
        let mut config: serde_json::Value = serde_json::from_str(json).unwrap();
        let overrides = serde_json::json!({
            "vocab_size": 50304, "n_embd": 2048, "n_layer": 18, "n_head": 16, "n_inner": 8192,
            "activation_function": "gelu", "use_cache": false
        });
        for (k, v) in overrides.as_object().unwrap() {
            config[k] = v.clone();
        }
        let from_config = ModelSpec::from_hf_config(&config.to_string()).unwrap();
        assert_eq!(spec(STAPEL), from_config);
    }

    #[test]
    fn the_fields_select_an_architecture() {
        use crate::Architecture as A;
        let neox = with_line(STAPEL, "positions", "positions = \"rotary\"");
        let neox = spec(&neox);
        assert_eq!(neox.architecture, A::GptNeox);
        assert!(!neox.parallel_residual);
        assert_eq!(neox.positions, crate::model::Positions::Rotary { dims: 128 });
        assert_eq!(neox.parameter_count(), spec(STAPEL).parameter_count() - 1024 * 2048);
        assert_eq!(spec(LLAMA).architecture, A::Llama);
        let biased = with_line(LLAMA, "bias", "bias = true");
        let biased = spec(&biased);
        assert!(biased.qkv_bias && biased.o_bias && biased.mlp_bias);
    }

    #[test]
    fn dropout_reaches_every_dropout_of_the_architecture() {
        let s = spec(STAPEL);
        assert_eq!((s.attention_dropout, s.hidden_dropout, s.embedding_dropout), (0.1, 0.1, 0.1));
        let llama = spec(&with_line(LLAMA, "dropout", "dropout = 0.2"));
        assert_eq!(
            (llama.attention_dropout, llama.hidden_dropout, llama.embedding_dropout),
            (0.2, 0.2, 0.0)
        );
        assert_eq!(spec(&with_line(LLAMA, "dropout", "dropout = 0")).attention_dropout, 0.0);
    }

    #[test]
    fn inconsistent_sizes_are_refused_naming_the_field() {
        check_error(
            &with_line(STAPEL, "heads", "heads = 15"),
            "'heads' = 15 does not divide 'hidden_size' = 2048",
        );
        check_error(
            &with_line(LLAMA, "kv_heads", "kv_heads = 5"),
            "'kv_heads' = 5 does not divide 'heads' = 32",
        );
        check_error(
            &with_line(STAPEL, "layers", "layers = 0"),
            "'layers' = 0 is out of range (1..=4096)",
        );
        check_error(
            &with_line(STAPEL, "vocab_size", "vocab_size = -3"),
            "'vocab_size' = -3 is out of range (1..=16777216)",
        );
        check_error(
            &with_line(STAPEL, "hidden_size", "hidden_size = 9223372036854775807"),
            "'hidden_size' = 9223372036854775807 is out of range (1..=262144)",
        );
        check_error(
            &with_line(STAPEL, "ffn_size", "ffn_size = 3072.5"),
            "'ffn_size' must be a positive integer",
        );
        check_error(
            &with_line(STAPEL, "dropout", "dropout = 1.0"),
            "'dropout' = 1 is not a probability below 1",
        );
        check_error(
            &with_line(STAPEL, "dropout", "dropout = nan"),
            "'dropout' = NaN is not a probability below 1",
        );
        check_error(&with_line(STAPEL, "bias", "bias = \"yes\""), "'bias' must be true or false");
        check_error(&with_line(STAPEL, "heads", ""), "the key 'heads' is missing");
        check_error(&with_line(STAPEL, "max_positions", ""), "the key 'max_positions' is missing");
    }

    #[test]
    fn sizes_whose_product_overflows_are_refused() {
        // Each size within its limit: the parameter count still fits 64 bits (about 2⁶²), the
        // bytes of the step do not, and the estimate says so instead of wrapping.
        let huge = with_line(LLAMA, "layers", "layers = 4096");
        let huge = with_line(&huge, "heads", "heads = 4096");
        let huge = with_line(&huge, "kv_heads", "kv_heads = 4096");
        let huge = with_line(&huge, "head_dim", "head_dim = 262144");
        let huge = with_line(&huge, "hidden_size", "hidden_size = 262144");
        let huge = spec(&huge);
        assert!(huge.parameter_count() > 1 << 61);
        let estimate = crate::estimate(&huge, &crate::TrainSetup::default());
        assert!(matches!(estimate, Err(crate::EstimateError::Overflow)), "{estimate:?}");
    }

    #[test]
    fn what_the_architecture_cannot_have_is_refused() {
        check_error(
            &with_line(STAPEL, "bias", "bias = false"),
            "'bias' = false: the gpt2 layout has a bias on every linear (layernorm, an MLP)",
        );
        check_error(
            &with_line(STAPEL, "kv_heads", "kv_heads = 4"),
            "'kv_heads' = 4: the gpt2 layout has no grouped-query attention: kv_heads must equal heads",
        );
        check_error(
            &with_line(STAPEL, "head_dim", "head_dim = 64"),
            "'head_dim' = 64: the gpt2 layout has heads of hidden_size / heads: drop head_dim",
        );
        check_error(
            &with_line(STAPEL, "norm", "norm = \"rmsnorm\""),
            "ffn = 'gelu', norm = 'rmsnorm', positions = 'learned' is no architecture vramfit simulates",
        );
        check_error(
            &with_line(STAPEL, "ffn", "ffn = \"geglu\""),
            "'ffn' = 'geglu' is not one of: gelu, gelu-tanh, gelu-new, relu, swiglu",
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_the_key_meant() {
        check_error(
            &format!("{STAPEL}\nnum_attention_heads = 16"),
            "unknown key 'num_attention_heads' (did you mean 'heads'?)",
        );
        check_error(
            &format!("{STAPEL}\nlayer = 3"),
            "unknown key 'layer' (did you mean 'layers'?)",
        );
        check_error(&format!("{STAPEL}\n[model]\nx = 1"), "unknown key 'model'");
        check_error(&format!("{STAPEL}\nrope_theta = 1e4"), "unknown key 'rope_theta'");
    }

    #[test]
    fn bad_toml_is_refused_with_its_position() {
        check_error(
            "vocab_size = 1\nhidden_size = \n",
            "not valid TOML at line 2 column 15: string values must be quoted, expected literal string",
        );
        check_error(
            &"#".repeat(MAX_MODEL_TOML_BYTES + 1),
            "the file is 65537 bytes, larger than any model description",
        );
        check_error(
            &with_line(STAPEL, "name", "name = \"a\\nb\""),
            "'name' must be a name of 1 to 100 characters on one line",
        );
    }

    #[test]
    fn no_truncation_or_byte_flip_panics() {
        for example in [STAPEL, GPT2, LLAMA] {
            for end in (0..=example.len()).filter(|&i| example.is_char_boundary(i)) {
                let _ = parse(&example[..end]);
            }
            let bytes = example.as_bytes();
            for i in 0..bytes.len() {
                for flip in [b'0', b'9', b'-', b'"', b'=', b'\n'] {
                    let mut b = bytes.to_vec();
                    b[i] = flip;
                    if let Ok(text) = std::str::from_utf8(&b) {
                        let _ = parse(text);
                    }
                }
            }
        }
    }
}
