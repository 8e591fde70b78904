//! The page in a real browser: headless Chromium driven through chromedriver's WebDriver API
//! (plain HTTP, the client in `http.rs`). Loads the page, changes the batch and checks that
//! the chart and the numbers change and equal the API's, drops a config.json, picks a file that
//! is not one, pastes an OOM message and a script, checks labels, keyboard and contrast, and
//! saves screenshots at a laptop's and a phone's width under `target/tmp/serve-screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` (`apt-get install chromium chromium-driver`).
//! Without them the test says so and passes; with `VRAMFIT_REQUIRE_BROWSER=1` (as `.ci/run`
//! sets) it fails instead.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::vramfit;
use crate::http::{Served, post, request};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find(names: &[&str], env: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env) {
        return Some(PathBuf::from(path));
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .find(|p| p.is_file())
}

/// A chromedriver with one Chromium session, both ended when dropped.
struct Browser {
    driver: Child,
    base: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(chromium: &Path, chromedriver: &Path) -> Browser {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base: SocketAddr = ([127, 0, 0, 1], port).into();
        let start = Instant::now();
        while std::net::TcpStream::connect(base).is_err() {
            assert!(start.elapsed() < Duration::from_secs(30), "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
        ]
        .map(String::from)
        .into_iter()
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let mut browser = Browser { driver, base, session: String::new(), _profile: profile };
        let answer = browser.call("POST", "/session", &capabilities);
        browser.session = answer["sessionId"].as_str().expect("a WebDriver session").to_owned();
        browser
    }

    fn call(&self, method: &str, path: &str, body: &Value) -> Value {
        let path = if path.starts_with("/session/") || path == "/session" {
            path.to_owned()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let bytes = if body.is_null() { Vec::new() } else { serde_json::to_vec(body).unwrap() };
        let response = request(
            self.base,
            method,
            &path,
            &[("Content-Type", "application/json; charset=utf-8")],
            &bytes,
        );
        let answer = response.json();
        assert_eq!(response.status, 200, "WebDriver {method} {path}: {answer}");
        answer["value"].clone()
    }

    fn run(&self, script: &str, args: &[Value]) -> Value {
        self.call("POST", "/execute/sync", &json!({"script": script, "args": args}))
    }

    fn element(&self, css: &str) -> String {
        let found = self.call("POST", "/element", &json!({"using": "css selector", "value": css}));
        found[ELEMENT].as_str().unwrap().to_owned()
    }

    fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/value"), &json!({ "text": text }));
    }

    fn clear(&self, css: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/clear"), &json!({}));
    }

    fn click(&self, css: &str) {
        let id = self.element(css);
        self.call("POST", &format!("/element/{id}/click"), &json!({}));
    }

    /// Polls `expression` (JavaScript) until it is truthy; returns its value.
    fn wait_for(&self, expression: &str, what: &str) -> Value {
        let start = Instant::now();
        loop {
            let value = self.run(&format!("return {expression};"), &[]);
            if !(value.is_null() || value == false || value == "") {
                return value;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn screenshot(&self, name: &str) {
        let png = base64(self.call("GET", "/screenshot", &Value::Null).as_str().unwrap());
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| request(self.base, "DELETE", &path, &[], b""));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> = text.bytes().filter(|c| *c != b'=' && !c.is_ascii_whitespace()).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | u32::from(value(c)) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// What the page shows: the figures and the bar's segments, as raw byte counts.
const SHOWN: &str = r"(() => {
  const v = (id) => document.getElementById(id).dataset.value;
  const segments = {};
  for (const s of document.querySelectorAll('#bar .segment')) segments[s.dataset.component] = Number(s.dataset.bytes);
  const rows = {};
  for (const r of document.querySelectorAll('#components tbody tr')) rows[r.dataset.component] = Number(r.querySelector('[data-bytes]').dataset.bytes);
  const phases = {};
  for (const r of document.querySelectorAll('#phases tbody tr')) phases[r.dataset.phase] = Number(r.querySelector('[data-bytes]').dataset.bytes);
  return {peak: v('peak'), capacity: v('capacity-out'), max_batch: v('max-batch'),
          fits: document.getElementById('fits').textContent, segments, rows, phases};
})()";

/// The WCAG contrast ratio of each visible text element's colour against white, lowest first.
const CONTRAST: &str = r"(() => {
  const lum = (rgb) => {
    const [r, g, b] = rgb.match(/\d+(\.\d+)?/g).slice(0, 3).map(Number).map((c) => {
      c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const out = [];
  for (const el of document.querySelectorAll('label, p, dt, dd, td, th, caption, h1, h2, h3, h4, code, button, li')) {
    if (!el.offsetParent || !el.textContent.trim()) continue;
    const style = getComputedStyle(el);
    const bg = style.backgroundColor === 'rgba(0, 0, 0, 0)' ? 'rgb(255,255,255)' : style.backgroundColor;
    const [a, b] = [lum(style.color), lum(bg)].sort((x, y) => y - x);
    out.push([(a + 0.05) / (b + 0.05), el.tagName + '#' + el.id + '.' + el.className]);
  }
  return out.sort((x, y) => x[0] - y[0]).slice(0, 3);
})()";

fn expected(served: &Served, body: &Value) -> Value {
    let estimate = post(served.addr, "/api/estimate", body);
    assert_eq!(estimate.status, 200, "{}", estimate.text());
    let e = estimate.json();
    let svg = post(served.addr, "/api/estimate/svg", body).text();
    let nonzero = |m: &Value| -> Value {
        Value::Object(
            m.as_object()
                .unwrap()
                .iter()
                .filter(|(_, v)| v.as_u64() != Some(0))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    json!({
        "peak": e["peak_allocated_bytes"].to_string(),
        "capacity": e["capacity_bytes"].to_string(),
        "max_batch": e["max_micro_batch"].to_string(),
        "fits_yes": e["fits"],
        "segments": nonzero(&e["components"]),
        "phases": e["phase_peaks"],
        "svg": svg.trim_end(),
    })
}

/// Whether the page's timeline is the SVG `svg`, node for node.
const SAME_CHART: &str = r"const drawn = document.querySelector('#timeline svg');
  const api = new DOMParser().parseFromString(arguments[0], 'image/svg+xml').documentElement;
  return drawn !== null && drawn.isEqualNode(api);";

/// After a model file was dropped or chosen (batch 4, 2,049 tokens): the page shows the API's
/// estimate of that file and names it.
#[track_caller]
fn shows_the_file(browser: &Browser, served: &Served, base: &Value, name: &str, text: &str) {
    let body = json!({"config": {"name": name, "text": text}, "batch": 4, "seq_len": 2049});
    let estimate = expected(served, &with(&without_model(base), body));
    browser.wait_for(
        &format!(
            "document.getElementById('peak').dataset.value === '{}'",
            estimate["peak"].as_str().unwrap()
        ),
        name,
    );
    browser.wait_for("document.body.dataset.state === 'idle'", "the update");
    check_shown(browser, &estimate);
    assert_eq!(
        browser.run("return document.getElementById('config-name').textContent;", &[]),
        format!("config: {name}")
    );
}

#[track_caller]
fn check_shown(browser: &Browser, expected: &Value) {
    let shown = browser.run(&format!("return {SHOWN};"), &[]);
    assert_eq!(browser.run(SAME_CHART, &[expected["svg"].clone()]), true, "the chart is the API's");
    assert_eq!(shown["peak"], expected["peak"]);
    assert_eq!(shown["capacity"], expected["capacity"]);
    assert_eq!(shown["max_batch"], expected["max_batch"]);
    assert_eq!(shown["fits"].as_str().unwrap().starts_with("yes"), expected["fits_yes"] == true);
    assert_eq!(shown["segments"], expected["segments"]);
    assert_eq!(shown["rows"], expected["segments"]);
    assert_eq!(shown["phases"], expected["phases"]);
}

#[test]
fn the_page_in_a_real_browser() {
    let (Some(chromium), Some(chromedriver)) = (
        find(&["chromium", "chromium-browser"], "VRAMFIT_CHROMIUM"),
        find(&["chromedriver"], "VRAMFIT_CHROMEDRIVER"),
    ) else {
        let missing = "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)";
        assert!(
            std::env::var_os("VRAMFIT_REQUIRE_BROWSER").is_none(),
            "VRAMFIT_REQUIRE_BROWSER is set but {missing}"
        );
        let message = format!("skipped the_page_in_a_real_browser: {missing}");
        // Straight to the terminal: the test harness does not capture this.
        let _ = writeln!(std::io::stderr().lock(), "{message}");
        return;
    };
    let served = Served::start();
    let browser = Browser::start(&chromium, &chromedriver);
    browser.call("POST", "/url", &json!({ "url": served.url() }));
    browser.wait_for(
        "document.body.dataset.ready === 'true' && document.body.dataset.updates",
        "the page",
    );

    // Every control has a label; Tab moves through them in order.
    let unlabelled = browser.run(
        "return [...document.querySelectorAll('input, select, textarea')].filter((e) => e.labels.length === 0).map((e) => e.id);",
        &[],
    );
    assert_eq!(unlabelled, json!([]));
    let contrast = browser.run(&format!("return {CONTRAST};"), &[]);
    assert!(contrast[0][0].as_f64().unwrap() >= 4.5, "low contrast: {contrast}");

    // The page opens on llama-3.2-1b, batch 1 × 2048, on an RTX 4090. It does not fit the
    // card: more than 23 GiB allocated, more reserved, plus the context, on a card whose OOM
    // messages report 23.64 GiB.
    let base = json!({"model": "llama-3.2-1b", "batch": 1, "seq_len": 2048, "gpu": "rtx-4090",
        "precision": "bf16-mixed", "optimizer": "adamw", "optimizer_impl": "foreach",
        "attention": "sdpa", "checkpointing": "none", "grad_accum": 1});
    let first = expected(&served, &base);
    check_shown(&browser, &first);
    assert_eq!(first["fits_yes"], false);
    browser.screenshot("laptop-batch-1.png");

    // The same step on an A100 80GB fits; batch 8 there does not: the verdict turns from
    // fits to does-not-fit as the batch grows, and the page follows the API both times.
    browser.click("#gpu option[value=a100-80gb]");
    let a100 = expected(&served, &with(&base, json!({"gpu": "a100-80gb"})));
    assert_eq!(a100["fits_yes"], true);
    browser.wait_for(
        &format!(
            "document.getElementById('capacity-out').dataset.value === '{}'",
            a100["capacity"].as_str().unwrap()
        ),
        "the A100",
    );
    browser.wait_for("document.body.dataset.state === 'idle'", "the update");
    check_shown(&browser, &a100);
    let shown = browser.run(&format!("return {SHOWN};"), &[]);
    assert!(shown["fits"].as_str().unwrap().starts_with("yes"), "{shown}");
    browser.clear("#batch");
    browser.type_into("#batch", "8");
    let eight = expected(&served, &with(&base, json!({"gpu": "a100-80gb", "batch": 8})));
    assert_eq!(eight["fits_yes"], false);
    browser.wait_for(
        &format!(
            "document.getElementById('peak').dataset.value === '{}'",
            eight["peak"].as_str().unwrap()
        ),
        "batch 8 on the A100",
    );
    browser.wait_for("document.body.dataset.state === 'idle'", "the update");
    check_shown(&browser, &eight);
    let shown = browser.run(&format!("return {SHOWN};"), &[]);
    assert!(shown["fits"].as_str().unwrap().starts_with("no, "), "{shown}");
    browser.screenshot("laptop-a100-batch-8.png");
    browser.click("#gpu option[value=rtx-4090]");

    // Typing batch 4 on the RTX 4090: the page follows the API.
    browser.clear("#batch");
    browser.type_into("#batch", "4");
    let four = expected(&served, &with(&base, json!({"batch": 4})));
    browser.wait_for(
        &format!(
            "document.getElementById('peak').dataset.value === '{}'",
            four["peak"].as_str().unwrap()
        ),
        "batch 4",
    );
    browser.wait_for("document.body.dataset.state === 'idle'", "the update");
    check_shown(&browser, &four);
    let shown = browser.run(&format!("return {SHOWN};"), &[]);
    assert_ne!(first["peak"], four["peak"]);
    assert_ne!(first["svg"], four["svg"]);
    assert_eq!(four["fits_yes"], false);
    assert!(shown["fits"].as_str().unwrap().starts_with("no, "));
    browser.screenshot("laptop-batch-4.png");

    // A batch the CLI refuses: its error, and no stale figures.
    browser.clear("#batch");
    browser.type_into("#batch", "0");
    let refused = post(served.addr, "/api/estimate", &with(&base, json!({"batch": 0}))).json();
    // (Clearing the field first asks for an empty batch, refused too: wait for batch 0's.)
    let error = json!(format!(
        "error: {}\nhint: {}",
        refused["error"].as_str().unwrap(),
        refused["hint"].as_str().unwrap()
    ))
    .to_string();
    browser.wait_for(
        &format!(
            "!document.getElementById('estimate-error').hidden && document.getElementById('estimate-error').textContent === {error}"
        ),
        "the error",
    );
    assert_eq!(browser.run("return document.getElementById('answer').hidden;", &[]), true);
    browser.clear("#batch");
    browser.type_into("#batch", "4");
    browser.wait_for("document.getElementById('estimate-error').hidden && !document.getElementById('answer').hidden", "the figures again");
    check_shown(&browser, &four);

    // The keyboard: from the batch, Tab reaches the sequence length, and ArrowUp changes it.
    browser.type_into("#batch", "\u{E004}");
    assert_eq!(browser.run("return document.activeElement.id;", &[]), "seq-len");
    browser.type_into("#seq-len", "\u{E013}");
    let longer = expected(&served, &with(&base, json!({"batch": 4, "seq_len": 2049})));
    browser.wait_for(
        &format!(
            "document.getElementById('peak').dataset.value === '{}'",
            longer["peak"].as_str().unwrap()
        ),
        "seq_len 2049",
    );

    // A capacity instead of a card, and a card without bf16: the CLI's warning shows.
    browser.click("#gpu option[value=custom]");
    browser.wait_for("!document.getElementById('capacity-field').hidden", "the capacity field");
    browser.clear("#capacity");
    browser.type_into("#capacity", "12GiB");
    let custom =
        expected(&served, &with(&base, json!({"batch": 4, "seq_len": 2049, "gpu": "12GiB"})));
    browser.wait_for(
        &format!(
            "document.getElementById('capacity-out').dataset.value === '{}'",
            custom["capacity"].as_str().unwrap()
        ),
        "the typed capacity",
    );
    browser.wait_for("document.body.dataset.state === 'idle'", "the update");
    check_shown(&browser, &custom);
    browser.click("#gpu option[value=t4]");
    let t4 = post(
        served.addr,
        "/api/estimate",
        &with(&base, json!({"batch": 4, "seq_len": 2049, "gpu": "t4"})),
    )
    .json();
    let warning = t4["warnings"][0].as_str().unwrap().to_owned();
    assert!(warning.contains("no hardware bf16"), "{warning}");
    // (The typed capacity's own warning, an unknown GPU generation, shows until the T4's
    // answer replaces it.)
    let line = json!(format!("warning: {warning}")).to_string();
    browser.wait_for(
        &format!("document.getElementById('warnings').textContent === {line}"),
        "the bf16 warning",
    );
    assert_eq!(browser.run("return document.getElementById('capacity-field').hidden;", &[]), true);
    browser.click("#gpu option[value=rtx-4090]");

    // Dropping a config.json: the page estimates that model.
    let dir = tempfile::tempdir().unwrap();
    let gpt2 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../vramfit-core/data/models/gpt2.json"),
    )
    .unwrap();
    browser.run(
        r"const [name, text] = arguments;
          const data = new DataTransfer();
          data.items.add(new File([text], name, {type: 'application/json'}));
          const target = document.getElementById('drop');
          for (const type of ['dragenter', 'dragover', 'drop'])
            target.dispatchEvent(new DragEvent(type, {dataTransfer: data, bubbles: true, cancelable: true}));",
        &[json!("config.json"), json!(gpt2)],
    );
    shows_the_file(&browser, &served, &base, "config.json", &gpt2);
    browser.screenshot("laptop-dropped-config.png");

    // Choosing a file that is not a config: the CLI's error line, on the page.
    let bad = dir.path().join("weights.json");
    std::fs::write(&bad, r#"{"hello": 1}"#).unwrap();
    browser.type_into("#config-file", bad.to_str().unwrap());
    let cli = vramfit()
        .current_dir(dir.path())
        .args(["estimate", "--model", "weights.json"])
        .output()
        .unwrap();
    let cli_error = String::from_utf8(cli.stderr).unwrap();
    let cli_first = cli_error.lines().next().unwrap().to_owned();
    let shown = browser.wait_for("document.getElementById('drop-note').classList.contains('error') && document.getElementById('drop-note').textContent", "the config error");
    assert_eq!(shown.as_str().unwrap().lines().next().unwrap(), cli_first);
    assert_eq!(shown.as_str().unwrap(), cli_error.trim_end());
    browser.screenshot("laptop-bad-config.png");

    // Choosing a model TOML: the page estimates the described model, as the API does.
    let stapel = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/stapel.toml"),
    )
    .unwrap();
    let toml = dir.path().join("stapel.toml");
    std::fs::write(&toml, &stapel).unwrap();
    browser.type_into("#config-file", toml.to_str().unwrap());
    shows_the_file(&browser, &served, &base, "stapel.toml", &stapel);
    browser.click("#config-clear");

    // Pasting an OOM message: the doctor's diagnoses, as the API gives them.
    let oom =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../vramfit-doctor/tests/fixtures/messages/003_mgfn_35_capacty_fragmentation.txt",
        ))
        .unwrap();
    let message = oom.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
    browser.type_into("#doctor-input", &message);
    browser.click("#doctor-run");
    let ids = browser.wait_for("[...document.querySelectorAll('#doctor-output .diagnosis')].map((d) => d.dataset.id).join(' ')", "the diagnosis");
    let api = post(served.addr, "/api/doctor", &json!({"text": message})).json();
    let api_ids: Vec<&str> = api["inputs"][0]["messages"][0]["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, api_ids.join(" "));
    assert!(ids.as_str().unwrap().starts_with("fragmentation"));
    let title = browser
        .run("return document.querySelector('#doctor-output .diagnosis h4').textContent;", &[]);
    assert_eq!(title, api["inputs"][0]["messages"][0]["diagnoses"][0]["title"]);

    // Pasting a script: the linter's findings.
    browser.type_into("#lint-input", "total_loss = 0\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    total_loss += loss\n");
    browser.click("#lint-run");
    let codes = browser.wait_for("[...document.querySelectorAll('#lint-output .finding')].map((f) => f.dataset.code).join(' ')", "the findings");
    assert!(codes.as_str().unwrap().contains("MEM101"), "{codes}");
    browser.run("document.getElementById('doctor').scrollIntoView();", &[]);
    browser.screenshot("laptop-doctor-lint.png");

    // Planning the step on the page: the plans, as the API (and `vramfit plan`) gives them.
    browser.run("document.getElementById('plan').scrollIntoView();", &[]);
    browser.click("#allow-lora");
    browser.click("#plan-run");
    let rows = browser.wait_for(
        "document.body.dataset.planning === 'false' && document.querySelectorAll('#plans tbody tr').length",
        "the plans",
    );
    let api = post(
        served.addr,
        "/api/plan",
        &with(&base, json!({"batch": 4, "seq_len": 2049, "loss": "standard", "allow": ["lora"]})),
    )
    .json();
    let plans = api["plans"].as_array().unwrap();
    assert!(!plans.is_empty(), "{api}");
    assert_eq!(rows.as_u64(), Some(plans.len() as u64));
    let first = browser
        .run("return document.querySelector('#plans tbody tr td.bytes').dataset.bytes;", &[]);
    assert_eq!(first, plans[0]["device_used_bytes"].to_string());
    let remedies = browser.run("return document.querySelectorAll('#remedies li').length;", &[]);
    assert_eq!(remedies.as_u64(), Some(api["remedies"].as_array().unwrap().len() as u64));
    browser.screenshot("laptop-plan.png");

    // A phone's width: nothing wider than the screen.
    browser.call("POST", "/window/rect", &json!({"width": 390, "height": 844}));
    browser.run("window.scrollTo(0, 0);", &[]);
    let widths =
        browser.run("return [document.documentElement.scrollWidth, window.innerWidth];", &[]);
    assert!(widths[0].as_u64() <= widths[1].as_u64(), "wider than a phone: {widths}");
    browser.screenshot("phone-top.png");
    browser.run("document.getElementById('results').scrollIntoView();", &[]);
    browser.screenshot("phone-results.png");
}

/// `base` with `changes` applied.
fn with(base: &Value, changes: Value) -> Value {
    let mut merged = base.clone();
    for (key, value) in changes.as_object().unwrap() {
        merged[key] = value.clone();
    }
    merged
}

fn without_model(base: &Value) -> Value {
    let mut rest = base.clone();
    rest.as_object_mut().unwrap().remove("model");
    rest
}
