//! `vramfit serve`'s JSON API over real HTTP: its bodies are the CLI's `--format json`, and
//! every malformed, oversized or misaddressed request gets a status and a JSON error.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::vramfit;
use crate::http::{Served, post, read_response, request};

const OOM: &str = "../vramfit-doctor/tests/fixtures/messages/003_mgfn_35_capacty_fragmentation.txt";
const LINT: &str = "../vramfit-lint/tests/fixtures/MEM101.py";

/// What `vramfit ARGS --format json` prints, run in `dir`.
fn cli_json(dir: &Path, args: &[&str]) -> Value {
    let output = vramfit().current_dir(dir).args(args).args(["--format", "json"]).output().unwrap();
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn estimate_body_is_the_cli_json() {
    let served = Served::start();
    for (request, args) in [
        (
            json!({"model": "llama-3.2-1b", "batch": 4, "seq_len": 2048, "gpu": "rtx-4090"}),
            vec![
                "--model",
                "llama-3.2-1b",
                "--batch",
                "4",
                "--seq-len",
                "2048",
                "--gpu",
                "rtx-4090",
            ],
        ),
        (
            json!({"model": "gpt2", "precision": "fp32", "optimizer": "sgd-momentum", "checkpointing": "full", "grad_accum": 4, "attention": "eager"}),
            vec![
                "--model",
                "gpt2",
                "--precision",
                "fp32",
                "--optimizer",
                "sgd-momentum",
                "--checkpointing",
                "full",
                "--grad-accum",
                "4",
                "--attention",
                "eager",
            ],
        ),
        (
            json!({"params": "7B", "precision": "bf16", "gpu": "24GiB"}),
            vec!["--params", "7B", "--precision", "bf16", "--gpu", "24GiB"],
        ),
    ] {
        let response = post(served.addr, "/api/estimate", &request);
        assert_eq!(response.status, 200, "{}", response.text());
        assert_eq!(response.header("Content-Type"), Some("application/json"));
        let cli = cli_json(manifest_dir(), &[&["estimate"], args.as_slice()].concat());
        assert_eq!(response.json(), cli, "{request}");
    }
}

#[test]
fn estimate_svg_is_the_cli_chart() {
    let served = Served::start();
    let dir = tempfile::tempdir().unwrap();
    let request = json!({"model": "qwen2.5-0.5b", "batch": 2, "seq_len": 1024, "gpu": "rtx-3080"});
    let response = post(served.addr, "/api/estimate/svg", &request);
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.header("Content-Type"), Some("image/svg+xml"));
    let svg = dir.path().join("step.svg");
    let status = vramfit()
        .args(["estimate", "--model", "qwen2.5-0.5b", "--batch", "2", "--seq-len", "1024"])
        .args(["--gpu", "rtx-3080", "--svg"])
        .arg(&svg)
        .output()
        .unwrap()
        .status;
    assert!(status.code().is_some_and(|c| c <= 1));
    assert_eq!(response.text(), std::fs::read_to_string(&svg).unwrap());

    let states_only = post(served.addr, "/api/estimate/svg", &json!({"params": "1B"}));
    assert_eq!(states_only.status, 400);
    assert_eq!(
        states_only.json()["error"],
        "--svg needs a model: a bare parameter count has no step to draw"
    );
}

/// A dropped config.json is read as `--model FILE` reads it, errors included.
#[test]
fn dropped_configs_are_read_as_the_cli_reads_files() {
    let served = Served::start();
    let dir = tempfile::tempdir().unwrap();
    let good =
        std::fs::read_to_string(manifest_dir().join("../vramfit-core/data/models/gpt2.json"))
            .unwrap();
    std::fs::write(dir.path().join("config.json"), &good).unwrap();
    let response = post(
        served.addr,
        "/api/estimate",
        &json!({"config": {"name": "config.json", "text": good}, "batch": 2}),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let mut api = response.json();
    let mut cli = cli_json(dir.path(), &["estimate", "--model", "config.json", "--batch", "2"]);
    // The CLI names a file by its folder; the page has only the file's name.
    assert_eq!(api["model"], "config.json");
    api["model"] = Value::Null;
    cli["model"] = Value::Null;
    assert_eq!(api, cli);

    for (name, text) in [
        ("weights.json", r#"{"hello": 1}"#),
        ("broken.json", r#"{"model_type": "llama", "hidden_size": "#),
        ("odd.json", r#"{"model_type": "llama", "hidden_size": -3}"#),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
        let output =
            vramfit().current_dir(dir.path()).args(["estimate", "--model", name]).output().unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8(output.stderr).unwrap();
        let response =
            post(served.addr, "/api/estimate", &json!({"config": {"name": name, "text": text}}));
        assert_eq!(response.status, 400);
        let body = response.json();
        let mut page = format!("error: {}\n", body["error"].as_str().unwrap());
        if let Some(hint) = body["hint"].as_str() {
            page.push_str(&format!("hint: {hint}\n"));
        }
        assert_eq!(page, stderr, "{name}");
    }
}

/// A dropped model TOML (its name ends in `.toml`) is read as `--model FILE.toml` reads it,
/// errors included.
#[test]
fn dropped_model_tomls_are_read_as_the_cli_reads_them() {
    let served = Served::start();
    let dir = tempfile::tempdir().unwrap();
    let stapel =
        std::fs::read_to_string(manifest_dir().join("../../examples/stapel.toml")).unwrap();
    std::fs::write(dir.path().join("stapel.toml"), &stapel).unwrap();
    let args = ["--batch", "2", "--checkpointing", "full"];
    let response = post(
        served.addr,
        "/api/estimate",
        &json!({"config": {"name": "stapel.toml", "text": stapel}, "batch": 2,
                "checkpointing": "full"}),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let api = response.json();
    let cli = cli_json(dir.path(), &[&["estimate", "--model", "stapel.toml"][..], &args].concat());
    assert_eq!(api, cli);
    assert_eq!(api["model_source"]["kind"], "toml");

    let broken = stapel.replace("heads = ", "heads = 7 #");
    std::fs::write(dir.path().join("broken.toml"), &broken).unwrap();
    let output = vramfit()
        .current_dir(dir.path())
        .args(["estimate", "--model", "broken.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let response = post(
        served.addr,
        "/api/estimate",
        &json!({"config": {"name": "broken.toml", "text": broken}}),
    );
    assert_eq!(response.status, 400);
    let body = response.json();
    let page = format!(
        "error: {}\nhint: {}\n",
        body["error"].as_str().unwrap(),
        body["hint"].as_str().unwrap()
    );
    assert_eq!(page, String::from_utf8(output.stderr).unwrap());
}

#[test]
fn doctor_body_is_the_cli_json() {
    let served = Served::start();
    let path = manifest_dir().join(OOM);
    let text = std::fs::read_to_string(&path).unwrap();
    let response = post(served.addr, "/api/doctor", &json!({"text": text}));
    assert_eq!(response.status, 200, "{}", response.text());
    let mut api = response.json();
    let mut cli = cli_json(manifest_dir(), &["doctor", OOM]);
    assert_eq!(api["inputs"][0]["input"], "pasted text");
    api["inputs"][0]["input"] = Value::Null;
    cli["inputs"][0]["input"] = Value::Null;
    assert_eq!(api, cli);
    assert_eq!(api["inputs"][0]["messages"][0]["diagnoses"][0]["id"], "fragmentation");

    let nothing = post(served.addr, "/api/doctor", &json!({"text": "all good, loss 0.31"}));
    assert_eq!(nothing.status, 400);
    assert_eq!(nothing.json()["error"], "no out-of-memory message found in pasted text");
}

#[test]
fn lint_body_is_the_cli_json() {
    let served = Served::start();
    let dir = tempfile::tempdir().unwrap();
    let source = std::fs::read_to_string(manifest_dir().join(LINT)).unwrap();
    std::fs::write(dir.path().join("train.py"), &source).unwrap();
    let response =
        post(served.addr, "/api/lint", &json!({"source": source, "filename": "train.py"}));
    assert_eq!(response.status, 200, "{}", response.text());
    let api = response.json();
    assert_eq!(api, cli_json(dir.path(), &["lint", "train.py"]));
    assert!(api["diagnostics"].as_array().unwrap().iter().any(|f| f["code"] == "MEM101"));

    let clean = post(served.addr, "/api/lint", &json!({"source": "print(1)\n"}));
    assert_eq!((clean.status, clean.json()["diagnostics"].clone()), (200, json!([])));
}

/// Status codes and JSON errors, each checked on a live server.
#[test]
fn bad_requests_get_a_status_and_a_json_error() {
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], &'a [u8], u16, &'a str);
    let served = Served::start();
    let addr = served.addr;
    let json_type = [("Content-Type", "application/json")];
    let cases: Vec<Case> = vec![
        ("GET", "/nope", &[], b"", 404, "no such page: /nope"),
        ("GET", "/api/estimate", &[], b"", 405, "method not allowed here"),
        (
            "POST",
            "/api/estimate",
            &[("Content-Type", "text/plain")],
            b"{}",
            415,
            "the request body must be JSON",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": ",
            400,
            "malformed JSON in the request body: EOF while parsing a value at line 1 column 10",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"\xff\xfe",
            400,
            "malformed JSON in the request body: expected value at line 1 column 1",
        ),
        ("POST", "/api/estimate", &json_type, b"[]", 400, "the request body must be a JSON object"),
        ("POST", "/api/estimate", &json_type, b"{}", 400, "no model given"),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"llama-9\"}",
            400,
            "unknown model 'llama-9'",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"./config.json\"}",
            400,
            "unknown model './config.json'",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"gpt2\", \"batch\": 0}",
            400,
            "batch = 0 is out of range",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"gpt2\", \"batch\": 1.5}",
            400,
            "invalid value '1.5' for `batch`: invalid digit found in string",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"gpt2\", \"precision\": \"fp8\"}",
            400,
            "unknown precision 'fp8'",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"gpt2\", \"gpu\": \"rtx-9999\"}",
            400,
            "unknown GPU 'rtx-9999'",
        ),
        (
            "POST",
            "/api/estimate",
            &json_type,
            b"{\"model\": \"gpt2\", \"svg\": \"/etc/x\"}",
            400,
            "unknown field `svg`",
        ),
        ("POST", "/api/doctor", &json_type, b"{\"text\": 3}", 400, "`text` must be a string"),
        ("POST", "/api/doctor", &json_type, b"{}", 400, "missing field `text`"),
        (
            "POST",
            "/api/lint",
            &json_type,
            b"{\"source\": \"x\", \"path\": \"/etc\"}",
            400,
            "unknown field `path`",
        ),
        (
            "GET",
            "/",
            &[("Host", "rebound.example")],
            b"",
            403,
            "this server answers only requests addressed to the loopback",
        ),
    ];
    for (method, path, headers, body, status, error) in cases {
        let response = request(addr, method, path, headers, body);
        assert_eq!(response.header("Content-Type"), Some("application/json"), "{path}");
        let answer = response.json();
        assert_eq!(
            (
                response.status,
                answer["error"].as_str().unwrap_or_default().split(" (").next().unwrap()
            ),
            (status, error),
            "{method} {path} {}",
            String::from_utf8_lossy(body)
        );
    }
}

/// Bodies over the cap get 413, whether announced by `Content-Length` or sent.
#[test]
fn oversized_bodies_get_413() {
    let served = Served::start();
    let over = vramfit_serve_cap() + 1;

    // Announced: refused without waiting for the body.
    let mut stream = TcpStream::connect(served.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        stream,
        "POST /api/lint HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {over}\r\nConnection: close\r\n\r\n",
        served.addr
    )
    .unwrap();
    let response = read_response(&mut stream);
    assert_eq!(response.status, 413);
    assert_eq!(response.json()["error"], "request body over 8 MiB");

    // Sent in chunks with no length given: read up to the cap, then refused.
    let mut stream = TcpStream::connect(served.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        stream,
        "POST /api/lint HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        served.addr
    )
    .unwrap();
    let chunk = vec![b' '; 1 << 20];
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        for _ in 0..=(over >> 20) {
            if write!(writer, "{:x}\r\n", chunk.len()).is_err()
                || writer.write_all(&chunk).is_err()
                || writer.write_all(b"\r\n").is_err()
            {
                return;
            }
        }
        let _ = writer.write_all(b"0\r\n\r\n");
    });
    let response = read_response(&mut stream);
    assert_eq!(response.status, 413);
    sender.join().unwrap();

    // Still serving.
    let after = post(served.addr, "/api/lint", &json!({"source": "x = 1\n"}));
    assert_eq!(after.status, 200);
}

fn vramfit_serve_cap() -> usize {
    8 << 20
}

/// Many requests at once are all answered, also while a client stalls mid-request, and the
/// server survives clients that hang up.
#[test]
fn concurrent_requests_are_served() {
    let mut served = Served::start();
    let addr = served.addr;
    // A client that sends half a request and waits.
    let mut stalled = TcpStream::connect(addr).unwrap();
    write!(
        stalled,
        "POST /api/estimate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 100\r\n\r\n{{\"mod"
    )
    .unwrap();
    // Clients that hang up before the answer.
    for _ in 0..4 {
        let mut gone = TcpStream::connect(addr).unwrap();
        let _ = write!(
            gone,
            "POST /api/estimate HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{{\"model\": \"llama-3.1-8b\"}}"
        );
    }
    let expected = post(addr, "/api/estimate", &json!({"model": "gpt2", "batch": 3})).json();
    let start = Instant::now();
    let threads: Vec<_> = (0..16)
        .map(|i| {
            std::thread::spawn(move || {
                let batch = 1 + i % 4;
                let response =
                    post(addr, "/api/estimate", &json!({"model": "gpt2", "batch": batch}));
                assert_eq!(response.status, 200);
                response.json()
            })
        })
        .collect();
    let answers: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(start.elapsed() < Duration::from_secs(60));
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer["setup"]["micro_batch"], 1 + i % 4);
        if i % 4 == 2 {
            assert_eq!(answer, &expected);
        }
    }
    // The stalled client gets its answer when it finishes.
    stalled.write_all(format!("{:<95}", "el\": \"gpt2\"}").as_bytes()).unwrap();
    stalled.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(read_response(&mut stalled).status, 200);
    assert!(served.alive());
}

#[test]
fn the_page_and_its_files_are_served() {
    let served = Served::start();
    let page = request(served.addr, "GET", "/", &[], b"");
    assert_eq!(page.status, 200);
    assert_eq!(page.header("Content-Type"), Some("text/html; charset=utf-8"));
    assert!(page.header("Content-Security-Policy").unwrap().contains("default-src 'none'"));
    for file in ["/app.js", "/style.css"] {
        assert!(page.text().contains(&format!("\"{file}\"")), "{file}");
        assert_eq!(request(served.addr, "GET", file, &[], b"").status, 200);
    }
    let options = request(served.addr, "GET", "/api/options", &[], b"").json();
    assert!(options["models"].as_array().unwrap().iter().any(|m| m == "llama-3.2-1b"));
    assert!(options["gpus"].as_array().unwrap().iter().any(|g| g["id"] == "rtx-4090"));
    assert_eq!(options["phases"], json!(["forward", "loss", "backward", "optimizer_step"]));
    assert_eq!(options["defaults"]["precision"], "bf16-mixed");
}

/// Another address than the loopback is a choice, with a warning; a port in use is one error.
#[test]
fn other_hosts_warn_and_busy_ports_fail() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port().to_string();
    let output =
        vramfit().args(["serve", "--host", "127.0.0.1", "--port", &port]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap().replace(&port, "PORT");
    assert_eq!(
        stderr.lines().map(|l| l.split(": Address").next().unwrap()).collect::<Vec<_>>(),
        [
            "error: cannot listen on 127.0.0.1:PORT",
            "hint: choose another port with --port N, or --port 0 for a free one"
        ]
    );
    // 0.0.0.0 on a port already taken: the warning is printed, and nothing ever listens.
    let output = vramfit().args(["serve", "--host", "0.0.0.0", "--port", &port]).output().unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap().replace(&port, "PORT");
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("warning: listening on 0.0.0.0: anyone who can reach this address can use the page and its API, without authentication\nerror: cannot listen on 0.0.0.0:PORT"), "{stderr}");
    drop(holder);
}

/// Input that takes a parser deep (nested brackets, a long line) is answered, and the server
/// lives on.
#[test]
fn deep_and_long_input_is_answered() {
    let mut served = Served::start();
    let nested = format!("x = {}1{}\n", "(".repeat(50_000), ")".repeat(50_000));
    let lint = post(served.addr, "/api/lint", &json!({"source": nested}));
    assert!(lint.status == 200 || lint.status == 400, "{}", lint.status);
    let deep_json = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let response = request(
        served.addr,
        "POST",
        "/api/estimate",
        &[("Content-Type", "application/json")],
        deep_json.as_bytes(),
    );
    assert_eq!(response.status, 400);
    assert!(response.json()["error"].as_str().unwrap().contains("recursion limit"));
    let long = "x".repeat(7 << 20);
    let doctor = post(served.addr, "/api/doctor", &json!({"text": long}));
    assert_eq!(doctor.status, 400);
    assert!(served.alive());
    assert_eq!(post(served.addr, "/api/lint", &json!({"source": "x = 1\n"})).status, 200);
}

#[test]
fn plan_body_is_the_cli_json() {
    let served = Served::start();
    let request = json!({"model": "gpt2", "batch": 16, "seq_len": 512, "precision": "fp32",
        "attention": "eager", "gpu": "rtx-3080", "forbid": ["adafactor", "paged-adamw-8bit"], "top": 3});
    let response = post(served.addr, "/api/plan", &request);
    assert_eq!(response.status, 200, "{}", response.text());
    let cli = cli_json(
        manifest_dir(),
        &[
            "plan",
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
            "--forbid",
            "adafactor,paged-adamw-8bit",
            "--top",
            "3",
        ],
    );
    assert_eq!(response.json(), cli);
    assert_eq!(cli["plans"].as_array().unwrap().len(), 3);
    // The planner needs a GPU: the CLI's error and hint, as a 400.
    let refused = post(served.addr, "/api/plan", &json!({"model": "gpt2"}));
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"], "plan needs a GPU");
    assert!(refused.json()["hint"].as_str().unwrap().contains("--gpu"));
}
