//! Integration tests of `vramfit doctor`: whole terminal sessions on the doctor's fixtures.

use std::path::PathBuf;

use insta_cmd::assert_cmd_snapshot;

use crate::cli::vramfit;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../vramfit-doctor/tests/fixtures")
}

fn doctor() -> std::process::Command {
    let mut cmd = vramfit();
    cmd.arg("doctor").current_dir(fixtures());
    cmd
}

#[test]
fn real_message_from_stdin() {
    let text =
        std::fs::read_to_string(fixtures().join("messages/003_mgfn_35_capacty_fragmentation.txt"))
            .unwrap();
    assert_cmd_snapshot!(doctor().pass_stdin(text));
}

#[test]
fn json_has_the_parsed_fields_and_diagnosis_ids() {
    assert_cmd_snapshot!(doctor().args([
        "--format",
        "json",
        "messages/053_cobra_24_rank_prefix.txt"
    ]));
}

#[test]
fn a_log_with_several_messages_and_their_trend() {
    assert_cmd_snapshot!(doctor().arg("logs/growing_across_steps.log"));
}

#[test]
fn a_truncated_message_says_what_is_missing() {
    assert_cmd_snapshot!(doctor().arg("logs/truncated.log"));
}

#[test]
fn not_an_oom_and_checkpoint_load() {
    assert_cmd_snapshot!(doctor().args(["logs/not_an_oom.log", "logs/checkpoint_load.log"]));
}

#[test]
fn no_oom_message_is_an_error() {
    assert_cmd_snapshot!(doctor().pass_stdin("epoch 1 loss 0.3\nepoch 2 loss 0.2\n"), @r"
    success: false
    exit_code: 2
    ----- stdout -----

    ----- stderr -----
    error: no out-of-memory message found in stdin
    hint: pass the whole error text or log, a torch.cuda.memory_summary() table, torch.cuda.memory_stats() as JSON, or a snapshot from torch.cuda.memory._dump_snapshot()
    ");
}

#[test]
fn memory_summary_and_memory_stats() {
    assert_cmd_snapshot!(
        doctor().args(["snapshots/memory_summary.txt", "snapshots/memory_stats.json"])
    );
}

#[test]
fn snapshot_with_chart() {
    let svg = std::env::temp_dir().join(format!("vramfit-doctor-{}.svg", std::process::id()));
    assert_cmd_snapshot!(
        doctor().args(["snapshots/oom_fragmented.pickle", "--top", "3", "--svg"]).arg(&svg)
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("<polyline"));
    let _ = std::fs::remove_file(svg);
}

#[test]
fn snapshot_from_stdin_reads_like_the_file() {
    let file = doctor().args(["snapshots/oom_fragmented.pickle", "--format", "json"]).output();
    let bytes = std::fs::read(fixtures().join("snapshots/oom_fragmented.pickle")).unwrap();
    let mut stdin = doctor();
    stdin.args(["--format", "json"]).stdin(std::process::Stdio::piped());
    stdin.stdout(std::process::Stdio::piped());
    let mut child = stdin.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), &bytes).unwrap();
    let piped = child.wait_with_output().unwrap();
    let file = file.unwrap();
    assert!(file.status.success() && piped.status.success());
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(text(&file).replace("snapshots/oom_fragmented.pickle", "stdin"), text(&piped));
}

#[test]
fn snapshot_over_the_memory_budget() {
    // The fixture's memo and its largest segment do not fit in a budget of 0 MiB.
    assert_cmd_snapshot!(doctor().args(["snapshots/oom_fragmented.pickle", "--max-memory", "0"]), @r"
    success: false
    exit_code: 2
    ----- stdout -----

    ----- stderr -----
    error: snapshots/oom_fragmented.pickle: pickle exceeds the memory limit
    hint: trace events are folded as they are read, so the memory goes to shared stack frames and segments; raise the budget with --max-memory <MiB>
    ");
}

#[test]
fn hostile_pickle_is_refused() {
    assert_cmd_snapshot!(doctor().arg("snapshots/hostile_reduce.pickle"), @r"
    success: false
    exit_code: 2
    ----- stdout -----

    ----- stderr -----
    error: snapshots/hostile_reduce.pickle: refusing pickle opcode STACK_GLOBAL at byte 43: it imports or calls Python code, which a memory snapshot never contains
    hint: vramfit only reads data pickles such as torch.cuda.memory._dump_snapshot() writes; do not unpickle this file in Python either
    ");
}

#[test]
fn missing_file() {
    let output = doctor().arg("does/not/exist.log").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn compared_with_the_estimate_of_the_step() {
    // Numbers come from the estimator, which has its own tests; only the verdict is checked.
    let output = doctor()
        .args(["--format", "json", "--model", "llama-3.2-1b", "--batch", "8", "--seq-len", "2048"])
        .arg("messages/007_pytorch_16417_comment_v2_shortage.txt")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let first = &json["inputs"][0]["messages"][0]["diagnoses"][0];
    assert_eq!(first["id"], "against_prediction");
    assert!(first["title"].as_str().unwrap().starts_with("the estimate agrees"));
    assert!(first["plan_request"]["shortfall"].as_u64().unwrap() > 0);
}

/// The seed forum thread: a transformer on an RTX 3080 (10 GB), batch 16, sequence 512,
/// "CUDA out of memory. Tried to allocate 2.50 GiB" — a message with no totals. The GPU and
/// setup on the command line are enough to say the step itself does not fit.
#[test]
fn the_forum_threads_bare_message_with_the_setup() {
    assert_cmd_snapshot!(
        doctor()
            .args([
                "--model",
                "bert-base-uncased",
                "--batch",
                "16",
                "--seq-len",
                "512",
                "--precision",
                "fp32",
                "--gpu",
                "rtx-3080",
            ])
            .pass_stdin("RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB\n")
    );
}

/// The forum thread quotes only "Tried to allocate 2.50 GiB": the report says what that
/// allows, asks for what would decide it, and exits 1 (no diagnosis), as documented.
#[test]
fn a_bare_message_says_what_would_decide_it_and_exits_1() {
    let text = "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB\n";
    assert_cmd_snapshot!(doctor().pass_stdin(text));
    assert_cmd_snapshot!(doctor().args(["--gpu", "rtx-3080"]).pass_stdin(text));
}

#[test]
fn a_snapshot_read_on_a_pipe_shows_no_progress() {
    for args in
        [&["snapshots/oom_fragmented.pickle"][..], &["-q", "snapshots/oom_fragmented.pickle"]]
    {
        let output = doctor().args(args).output().unwrap();
        assert!(output.status.success());
        assert!(output.stderr.is_empty(), "{}", String::from_utf8_lossy(&output.stderr));
    }
}

/// The forum thread as the user ran it (GPT-2 in fp32, AdamW, eager attention, 16 × 512 on
/// an RTX 3080): the estimate agrees the step does not fit, and the plans for that run take
/// the place of the generic list of training changes.
#[test]
fn the_forum_thread_ranks_the_plans_for_that_run() {
    assert_cmd_snapshot!(
        doctor()
            .args([
                "--model",
                "gpt2",
                "--batch",
                "16",
                "--seq-len",
                "512",
                "--precision",
                "fp32",
                "--attention",
                "eager",
                "--gpu",
                "rtx-3080",
            ])
            .pass_stdin("RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let message = dir.path().join("crash.log");
    std::fs::write(&message, "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB\n")
        .unwrap();
    let output = doctor()
        .args(["--format", "json", "--model", "gpt2", "-b", "16", "-s", "512"])
        .args(["--precision", "fp32", "--attention", "eager", "--gpu", "rtx-3080"])
        .arg(&message)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let plan = &json["inputs"][0]["plan"];
    assert!(!plan["plans"].as_array().unwrap().is_empty());
    let first = &json["inputs"][0]["messages"][0]["diagnoses"][0];
    let remedies: Vec<&str> =
        first["remedies"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert!(!remedies.contains(&"activation_checkpointing"), "{remedies:?}");
}
