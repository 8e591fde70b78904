//! Integration tests of `vramfit estimate` on several GPUs: per-rank memory, B_effective,
//! offload's host memory, and the combinations that cannot run.

use insta_cmd::assert_cmd_snapshot;

use crate::cli::{estimate_error, estimate_json as json, vramfit};

/// "On 8×A100 with ZeRO-3?": Llama-3.1-70B, full fine-tuning, 4 nodes of 8.
#[test]
fn llama_70b_with_zero3_on_four_nodes_of_eight() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.1-70b",
        "--seq-len",
        "4096",
        "--checkpointing",
        "full",
        "--gpus",
        "8",
        "--nodes",
        "4",
        "--strategy",
        "zero3",
        "--gpu",
        "a100-80gb",
    ]));
}

/// FSDP with CPU offload: the host memory of a node, and B_effective from a global batch.
#[test]
fn fsdp_with_cpu_offload_and_a_global_batch() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--model",
        "llama-3.1-8b",
        "--seq-len",
        "2048",
        "--checkpointing",
        "full",
        "--gpus",
        "4",
        "--strategy",
        "fsdp",
        "--offload",
        "params",
        "--global-batch",
        "32",
        "--batch",
        "2",
        "--gpu",
        "rtx-4090",
    ]));
}

/// The seed article's effective batch, in JSON: B_micro × k × GPUs, with `--global-batch`
/// setting k.
#[test]
fn json_reports_the_ranks_and_the_effective_batch() {
    let v =
        json(&["--model", "gpt2", "-b", "4", "--grad-accum", "2", "--gpus", "8", "--nodes", "2"]);
    assert_eq!(v["ranks"]["data_parallel_ranks"], 16);
    assert_eq!(v["ranks"]["effective_batch"], 4 * 2 * 16);
    assert_eq!(v["ranks"]["worst_rank"], "all_alike");
    assert_eq!(v["setup"]["parallel"]["strategy"], "ddp", "several GPUs default to DDP");
    assert!(v["ranks"]["host_memory"]["per_node_bytes"].is_null());
    assert_eq!(v["ranks"]["nccl_allowance_bytes"], 688u64 << 20);
    let g = json(&["--model", "gpt2", "-b", "4", "--gpus", "8", "--global-batch", "64"]);
    assert_eq!(g["setup"]["grad_accum"], 2);
    assert_eq!(g["ranks"]["effective_batch"], 64);
    let one = json(&["--model", "gpt2"]);
    assert_eq!(one["ranks"]["effective_batch"], 1);
    assert_eq!(one["ranks"]["worst_rank"], "single");
    assert_eq!(one["ranks"]["nccl_allowance_bytes"], 0);
    // FSDP1's names: SHARD_GRAD_OP is FSDP without resharding after forward.
    let grad_op = json(&["--model", "gpt2", "--gpus", "4", "--strategy", "shard-grad-op"]);
    assert_eq!(grad_op["setup"]["parallel"]["strategy"], "fsdp");
    assert_eq!(grad_op["setup"]["parallel"]["reshard_after_forward"], false);
    let hybrid =
        json(&["--model", "gpt2", "--gpus", "4", "--nodes", "2", "--strategy", "hybrid-shard"]);
    assert_eq!(hybrid["setup"]["parallel"]["strategy"], "hsdp");
    assert_eq!(hybrid["ranks"]["nccl_allowance_bytes"], 2 * (688u64 << 20));
    // Uneven FSDP shards: GPT-2's 50257 embedding rows over 3 ranks.
    let uneven = json(&["--model", "gpt2", "--gpus", "3", "--strategy", "fsdp"]);
    assert_eq!(uneven["ranks"]["worst_rank"], "rank0");
    let offload =
        json(&["--model", "gpt2", "--gpus", "2", "--strategy", "zero3", "--offload", "both"]);
    let host = &offload["ranks"]["host_memory"];
    assert_eq!(host["ranks_per_node"], 2);
    assert_eq!(
        host["per_node_bytes"].as_u64().unwrap(),
        2 * host["per_rank_bytes"].as_u64().unwrap()
    );
}

/// Sharding divides a rank's model states: ZeRO-3 and FSDP on 8 GPUs hold about an eighth of
/// DDP's (which holds the model, its gradients, the buckets' copy and Adam's two states).
#[test]
fn sharding_divides_the_model_states() {
    let states = |extra: &[&str]| {
        let args: Vec<&str> =
            ["--model", "llama-3.2-1b", "--gpus", "8"].iter().chain(extra).copied().collect();
        json(&args)["model_states_bytes"].as_u64().unwrap()
    };
    let ddp = states(&["--strategy", "ddp"]);
    let zero1 = states(&["--strategy", "zero1"]);
    let zero2 = states(&["--strategy", "zero2"]);
    let zero3 = states(&["--strategy", "zero3"]);
    let fsdp = states(&["--strategy", "fsdp"]);
    assert!(zero3 <= zero2 && zero2 <= zero1 && zero1 <= ddp, "{zero3} {zero2} {zero1} {ddp}");
    // fp32 sharded parameters, gradients and Adam states: 16 B per parameter over 8 ranks.
    let params = json(&["--model", "llama-3.2-1b"])["parameters"].as_u64().unwrap();
    let expected = params * 16 / 8;
    assert!(fsdp.abs_diff(expected) < expected / 100, "{fsdp} vs {expected}");
    // DDP without bucket views: 4 + 4 + 4 + 8 B per parameter.
    assert!(ddp.abs_diff(params * 20) < params / 100, "{ddp} vs {}", params * 20);
}

/// Warnings: a strategy on one GPU, ZeRO on one GPU without offload, HSDP on one node, and
/// uneven shards that are mostly padding.
#[test]
fn strategies_that_share_nothing_are_warned_about() {
    let mut transcript = String::new();
    for args in [
        &["--model", "gpt2", "--gpus", "1", "--strategy", "fsdp"][..],
        &["--model", "gpt2", "--strategy", "ddp"],
        &["--model", "gpt2", "--strategy", "zero2"],
        &["--model", "gpt2", "--gpus", "8", "--strategy", "hsdp"],
        &["--model", "mixtral-8x7b", "--gpus", "16", "--strategy", "fsdp"],
    ] {
        let output = vramfit().arg("estimate").args(args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let warnings: Vec<&str> = stdout.lines().filter(|l| l.starts_with("warning: ")).collect();
        assert_eq!(warnings.len(), 1, "{args:?}: {stdout}");
        transcript.push_str(&format!("# {}\n{}\n", args.join(" "), warnings[0]));
    }
    insta::assert_snapshot!(transcript);
}

/// Every combination that cannot run: one `error:` line naming it, one `hint:`, exit 2.
#[test]
fn bad_multi_gpu_input_is_one_error_line_a_hint_and_exit_2() {
    let cases: &[(&str, &[&str])] = &[
        ("nodes without gpus", &["--model", "gpt2", "--nodes", "2"]),
        ("zero gpus", &["--model", "gpt2", "--gpus", "0"]),
        ("absurd nodes", &["--model", "gpt2", "--gpus", "8", "--nodes", "1000000"]),
        ("unknown strategy", &["--model", "gpt2", "--gpus", "8", "--strategy", "tp"]),
        (
            "several gpus without a strategy",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "none"],
        ),
        ("offload without sharding", &["--model", "gpt2", "--gpus", "8", "--offload", "optimizer"]),
        ("offload on one gpu", &["--model", "gpt2", "--offload", "optimizer"]),
        (
            "parameter offload with zero2",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "zero2", "--offload", "params"],
        ),
        (
            "fsdp optimizer offload alone",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "fsdp", "--offload", "optimizer"],
        ),
        (
            "unknown offload",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "zero3", "--offload", "nvme"],
        ),
        (
            "reshard without fsdp",
            &[
                "--model",
                "gpt2",
                "--gpus",
                "8",
                "--strategy",
                "zero3",
                "--reshard-after-forward",
                "false",
            ],
        ),
        (
            "pure bf16 with deepspeed",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "zero2", "--precision", "bf16"],
        ),
        (
            "global batch the gpus cannot split",
            &["--model", "gpt2", "-b", "4", "--gpus", "8", "--global-batch", "100"],
        ),
        (
            "global batch against grad-accum",
            &["--model", "gpt2", "--gpus", "8", "--global-batch", "64", "--grad-accum", "4"],
        ),
        (
            "more fsdp ranks than rows",
            &["--model", "gpt2", "--gpus", "1024", "--nodes", "64", "--strategy", "fsdp"],
        ),
        (
            "bucket view without ddp",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "fsdp", "--gradient-as-bucket-view"],
        ),
        (
            "ddp bucket size with zero",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "zero2", "--bucket-cap-mb", "50"],
        ),
        (
            "deepspeed knob without zero",
            &[
                "--model",
                "gpt2",
                "--gpus",
                "8",
                "--strategy",
                "fsdp",
                "--reduce-bucket-size",
                "5e8",
            ],
        ),
        (
            "zero reduce bucket",
            &["--model", "gpt2", "--gpus", "8", "--strategy", "zero2", "--reduce-bucket-size", "0"],
        ),
        (
            "bad bucket size",
            &[
                "--model",
                "gpt2",
                "--gpus",
                "8",
                "--strategy",
                "zero3",
                "--allgather-bucket-size",
                "lots",
            ],
        ),
        ("bare count offload on ddp", &["--params", "7B", "--gpus", "8", "--offload", "both"]),
    ];
    let mut transcript = String::new();
    for (what, args) in cases {
        let stderr = estimate_error(what, args);
        transcript.push_str(&format!("# {what}\n{stderr}"));
    }
    insta::assert_snapshot!(transcript);
}

/// A bare parameter count shards too: ZeRO-3's 18 + 2 bytes per parameter over the ranks.
#[test]
fn a_bare_count_on_several_gpus() {
    assert_cmd_snapshot!(vramfit().args([
        "estimate",
        "--params",
        "7B",
        "--gpus",
        "8",
        "--strategy",
        "zero3",
        "--gpu",
        "a100-40gb",
    ]));
}
