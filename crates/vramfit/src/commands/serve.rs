//! `vramfit serve`: the local web page. The HTTP side is `vramfit_serve`; this module turns
//! each API request into the arguments of `estimate`, `doctor` or `lint` and answers with what
//! their `--format json` (and `estimate --svg`) write, through the same functions.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use clap::FromArgMatches;
use serde_json::{Map, Value, json};
use vramfit_core::{
    Attention, Checkpointing, Component, LossKernel, Optimizer, OptimizerImpl, Phase, Precision,
};
use vramfit_serve::{Api, Reply, Route, Server};

use super::estimate::{self, ModelSource, SetupArgs};
use super::{doctor, lint};
use crate::{Failure, Outcome};

/// Arguments of `vramfit serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The port to listen on (0 picks a free one and prints it).
    #[arg(long, default_value_t = 8765, value_name = "N")]
    pub port: u16,

    /// The address to listen on. Anything but the loopback exposes the page and its API to
    /// the network, without authentication.
    #[arg(long, default_value = "127.0.0.1", value_name = "IP")]
    pub host: IpAddr,
}

/// The model the page opens with.
const DEFAULT_MODEL: &str = "llama-3.2-1b";
/// The GPU the page opens with.
const DEFAULT_GPU: &str = "rtx-4090";
/// The name a pasted script or log has in the answers, where the CLI has a path.
const PASTED_SCRIPT: &str = "pasted.py";
const PASTED_TEXT: &str = "pasted text";

/// Runs `vramfit serve` until it is interrupted.
pub fn run(args: ServeArgs) -> Result<Outcome, Failure> {
    if !args.host.is_loopback() {
        eprintln!(
            "warning: listening on {}: anyone who can reach this address can use the page and its API, without authentication",
            args.host
        );
    }
    let server = Server::bind(args.host, args.port).map_err(|e| {
        Failure::with_hint(e, "choose another port with --port N, or --port 0 for a free one")
    })?;
    let host = match server.addr().ip() {
        IpAddr::V6(ip) => format!("[{ip}]"),
        IpAddr::V4(ip) => ip.to_string(),
    };
    // The address on stdout (data: a script can read it), then serve until interrupted.
    println!("http://{host}:{}/", server.addr().port());
    eprintln!("vramfit serve: press Ctrl-C to stop");
    server.run(Arc::new(WebApi));
    Ok(Outcome::Success)
}

/// The page's API, answered by the CLI's own functions.
struct WebApi;

impl Api for WebApi {
    fn options(&self) -> Reply {
        let defaults = match parse_setup(&Map::new()) {
            Ok(setup) => setup,
            Err(failure) => return error(&failure),
        };
        let names = |names: &mut dyn Iterator<Item = &'static str>| names.collect::<Vec<_>>();
        let checkpointing = [
            Checkpointing::None,
            Checkpointing::Every(4),
            Checkpointing::Every(2),
            Checkpointing::Full,
        ]
        .map(|c| c.to_string());
        let body = json!({
            "models": vramfit_core::catalog::names(),
            "gpus": vramfit_core::gpu::catalog()
                .into_iter()
                .map(|g| json!({ "id": g.id, "name": g.name }))
                .collect::<Vec<_>>(),
            "precisions": names(&mut Precision::ALL.iter().map(|p| p.name())),
            "optimizers": names(&mut Optimizer::ALL.iter().map(|o| o.name())),
            "optimizer_impls": names(&mut OptimizerImpl::ALL.iter().map(|o| o.name())),
            "attentions": names(&mut Attention::ALL.iter().map(|a| a.name())),
            "checkpointing": checkpointing,
            "losses": names(&mut LossKernel::ALL.iter().map(|l| l.name())),
            "components": Component::ALL
                .iter()
                .zip(estimate::svg::COLOURS)
                .map(|(c, colour)| json!({ "name": c.name(), "colour": colour }))
                .collect::<Vec<_>>(),
            "phases": names(&mut Phase::ALL.iter().map(|p| p.name())),
            "defaults": {
                "model": DEFAULT_MODEL,
                "gpu": DEFAULT_GPU,
                "precision": defaults.precision,
                "optimizer": defaults.optimizer,
                "optimizer_impl": defaults.optimizer_impl,
                "attention": defaults.attention,
                "checkpointing": defaults.checkpointing,
                "loss": defaults.loss,
            },
        });
        Reply::json(serde_json::to_vec_pretty(&body).unwrap_or_default())
    }

    fn post(&self, route: Route, body: &Map<String, Value>) -> Reply {
        let mut out = Vec::new();
        let done = match route {
            Route::Estimate => estimate_report(body, false)
                .and_then(|report| estimate::render_json(&mut out, &report)),
            Route::EstimateSvg => estimate_report(body, true)
                .and_then(|report| estimate::render_svg(&mut out, &report)),
            Route::Doctor => text_field(body, "text", &[]).and_then(|text| {
                let analysis = doctor::analyse_text(PASTED_TEXT, &text)?;
                Ok(doctor::write_json(&mut out, std::slice::from_ref(&analysis))?)
            }),
            Route::Plan => plan_report(body)
                .and_then(|report| Ok(super::plan::json::render(&mut out, &report)?)),
            Route::Lint => text_field(body, "source", &["filename"]).and_then(|source| {
                let filename = match body.get("filename") {
                    None | Some(Value::Null) => PASTED_SCRIPT.to_owned(),
                    Some(Value::String(name)) => name.clone(),
                    Some(_) => return Err(bad_field("filename", "a string")),
                };
                lint::lint_text_json(&mut out, &filename, source)
            }),
        };
        match done {
            Ok(()) if route == Route::EstimateSvg => Reply::svg(out),
            Ok(()) => Reply::json(out),
            Err(failure) => error(&failure),
        }
    }
}

fn error(failure: &Failure) -> Reply {
    Reply::error(400, failure.message(), failure.hint_line())
}

fn bad_field(name: &str, expected: &str) -> Failure {
    Failure::with_hint(format!("`{name}` must be {expected}"), "see the API in docs/serve.md")
}

/// The one string field a doctor or lint request carries; `also` lists the others allowed.
fn text_field(body: &Map<String, Value>, name: &str, also: &[&str]) -> Result<String, Failure> {
    if let Some(key) = body.keys().find(|k| *k != name && !also.contains(&k.as_str())) {
        return Err(Failure::with_hint(
            format!("unknown field `{key}`"),
            format!("send {{\"{name}\": \"...\"}}"),
        ));
    }
    match body.get(name) {
        Some(Value::String(text)) => Ok(text.clone()),
        None => Err(Failure::with_hint(
            format!("missing field `{name}`"),
            format!("send {{\"{name}\": \"...\"}}"),
        )),
        Some(_) => Err(bad_field(name, "a string")),
    }
}

/// `plan`'s flags as the API takes them: the setup and the search.
#[derive(Debug, clap::Args)]
struct PlanFields {
    #[command(flatten)]
    setup: SetupArgs,
    #[command(flatten)]
    search: super::plan::SearchArgs,
}

/// Runs the planner on a request: the model as for the estimate, the setup and the search
/// (`global_batch`, `keep`, `forbid`, `allow`, `top`, `host_ram`) as `plan`'s flags.
fn plan_report(body: &Map<String, Value>) -> Result<super::plan::PlanReport, Failure> {
    let fields: PlanFields = parse_fields(body, "plan")?;
    let source = model_source(body, &fields.setup)?;
    let gpu = fields.setup.gpu()?;
    super::plan::compute(&fields.setup, source, gpu, &fields.search)
}

/// Runs the estimate of a request: the model from `model` (a built-in name) or `config`
/// (`{"name": ..., "text": ...}`, a dropped config.json), the rest as `estimate`'s flags.
fn estimate_report(body: &Map<String, Value>, chart: bool) -> Result<estimate::Report, Failure> {
    let setup = parse_setup(body)?;
    let source = model_source(body, &setup)?;
    estimate::compute_with(&setup, source, chart)
}

/// The model of a request: `model` (a built-in name) or `config` (a dropped config.json, or a
/// model TOML when its name ends in `.toml`).
fn model_source(body: &Map<String, Value>, setup: &SetupArgs) -> Result<ModelSource, Failure> {
    let source = match (body.get("model"), body.get("config")) {
        (Some(_), Some(_)) => {
            return Err(Failure::with_hint(
                "both `model` and `config` given",
                "send a built-in model's name or a config.json, not both",
            ));
        }
        (Some(Value::String(name)), None) => setup.with_task(ModelSource::builtin(name)?)?,
        (Some(_), None) => return Err(bad_field("model", "a built-in model's name")),
        (None, Some(Value::Object(file))) => {
            let Some(Value::String(text)) = file.get("text") else {
                return Err(bad_field("config.text", "the text of a config.json or model TOML"));
            };
            let name = match file.get("name") {
                Some(Value::String(name)) if !name.is_empty() => name.clone(),
                None | Some(Value::Null) => "config.json".to_owned(),
                _ => return Err(bad_field("config.name", "the file's name")),
            };
            let is_toml =
                Path::new(&name).extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"));
            let source = if is_toml {
                ModelSource::from_toml(text, &name)?
            } else {
                ModelSource::from_config(name.clone(), text, &name)?
            };
            setup.with_task(source)?
        }
        (None, Some(_)) => {
            return Err(bad_field("config", "an object {\"name\": ..., \"text\": ...}"));
        }
        (None, None) => setup.model_source()?,
    };
    Ok(source)
}

/// `estimate`'s setup flags from a request's fields (`seq_len` is `--seq-len`), parsed by the
/// same clap definition as the command line, so defaults and errors are the CLI's. `model` and
/// `config` are left to the caller: the server never reads a path or the Hub.
fn parse_setup(body: &Map<String, Value>) -> Result<SetupArgs, Failure> {
    parse_fields(body, "estimate")
}

/// A command's flags from a request's fields, parsed by their clap definition; a list is
/// the flag's comma-separated values.
fn parse_fields<T: clap::Args + FromArgMatches>(
    body: &Map<String, Value>,
    name: &'static str,
) -> Result<T, Failure> {
    let command = T::augment_args(clap::Command::new(name).no_binary_name(true));
    let longs: Vec<String> = command
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|long| long != "model")
        .collect();
    let mut argv = Vec::new();
    for (key, value) in body {
        if key == "model" || key == "config" {
            continue;
        }
        let flag = key.replace('_', "-");
        if !longs.contains(&flag) {
            let known = longs.iter().map(|l| l.replace('-', "_")).collect::<Vec<_>>().join(", ");
            return Err(Failure::with_hint(
                format!("unknown field `{key}`"),
                format!("the fields are model, config, {known}"),
            ));
        }
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(n) => n.to_string(),
            Value::Null => continue,
            Value::Array(items) if items.iter().all(Value::is_string) => {
                items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(",")
            }
            _ => return Err(bad_field(key, "a string or a number")),
        };
        argv.push(format!("--{flag}={text}"));
    }
    let matches = command.try_get_matches_from(argv).map_err(|e| field_error(&e))?;
    T::from_arg_matches(&matches).map_err(|e| field_error(&e))
}

/// clap's error about a flag, said about the request's field.
fn field_error(err: &clap::Error) -> Failure {
    use clap::error::{ContextKind, ContextValue};
    let context = |kind| match err.get(kind) {
        Some(ContextValue::String(text)) => Some(text.clone()),
        _ => None,
    };
    let field = context(ContextKind::InvalidArg).map(|arg| {
        let flag = arg.trim_start_matches('-');
        flag.split([' ', '=']).next().unwrap_or(flag).replace('-', "_")
    });
    match (field, context(ContextKind::InvalidValue)) {
        (Some(field), Some(value)) => {
            let reason =
                std::error::Error::source(err).map(|e| format!(": {e}")).unwrap_or_default();
            Failure::with_hint(
                format!("invalid value '{value}' for `{field}`{reason}"),
                format!("see `vramfit estimate --help` for the values `{field}` takes"),
            )
        }
        _ => {
            let text = err.render().to_string();
            let first = text.lines().next().unwrap_or_default();
            Failure::with_hint(
                first.strip_prefix("error: ").unwrap_or(first),
                "the fields are estimate's flags with _ for -: see `vramfit estimate --help`",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(body: Value, expected: &str) {
        let Value::Object(body) = body else { panic!("an object") };
        let shown = match parse_setup(&body) {
            Ok(setup) => format!(
                "batch {} seq {} {} {} accum {} gpu {:?}",
                setup.batch,
                setup.seq_len,
                setup.precision,
                setup.optimizer,
                setup.grad_accum,
                setup.gpu
            ),
            Err(failure) => failure.to_string().trim_end().to_owned(),
        };
        assert_eq!(shown, expected);
    }

    #[test]
    fn fields_are_the_cli_flags() {
        check(json!({}), "batch 1 seq 512 bf16-mixed adamw accum 1 gpu None");
        check(
            json!({"batch": 4, "seq_len": 2048, "precision": "fp32", "grad_accum": 8, "gpu": "24GiB", "model": "x"}),
            "batch 4 seq 2048 fp32 adamw accum 8 gpu Some(\"24GiB\")",
        );
        check(
            json!({"batch": "-1"}),
            "error: invalid value '-1' for `batch`: invalid digit found in string\nhint: see `vramfit estimate --help` for the values `batch` takes",
        );
        check(
            json!({"bacth": 4}),
            "error: unknown field `bacth`\nhint: the fields are model, config, params, batch, seq_len, target_len, precision, optimizer, optimizer_state_dtype, optimizer_impl, attention, checkpointing, grad_accum, gpu, freeze, lora_rank, lora_alpha, lora_targets, lora_dropout, modules_to_save, use_dora, quantization, double_quant, compute_dtype, quant_skip_modules, cuda_context, alloc_conf, margin, loop, zero_grad, use_cache, target, cuda_version, loss, task, num_labels, gpus, nodes, strategy, reshard_after_forward, offload, global_batch, gradient_as_bucket_view, bucket_cap_mb, reduce_bucket_size, allgather_bucket_size, stage3_prefetch_bucket_size, stage3_max_live_parameters, stage3_param_persistence_threshold",
        );
        check(
            json!({"gpus": 8, "strategy": "zero3", "gradient_as_bucket_view": null}),
            "batch 1 seq 512 bf16-mixed adamw accum 1 gpu None",
        );
        check(
            json!({"batch": [4]}),
            "error: `batch` must be a string or a number\nhint: see the API in docs/serve.md",
        );
    }
}
