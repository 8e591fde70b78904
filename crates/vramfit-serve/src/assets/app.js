// vramfit serve: the page's behaviour. Every figure comes from the JSON API, whose bodies are
// `vramfit estimate|plan|doctor|lint --format json`; the timeline is `vramfit estimate --svg`.
"use strict";

const $ = (id) => document.getElementById(id);
const GIB = 1024 ** 3, MIB = 1024 ** 2, KIB = 1024;
let options = null;
let config = null;        // {name, text} of a chosen or dropped config.json or model TOML
let sequence = 0;         // answers to older requests are dropped
let timer = null;

// The CLI's `Bytes` display: 1.40 GiB, 512.0 MiB, 3.0 KiB, 17 B.
function bytes(n) {
  if (n === null || n === undefined) return "—";
  const a = Math.abs(n), sign = n < 0 ? "−" : "";
  if (a >= GIB) return sign + (a / GIB).toFixed(2) + " GiB";
  if (a >= MIB) return sign + (a / MIB).toFixed(1) + " MiB";
  if (a >= KIB) return sign + (a / KIB).toFixed(1) + " KiB";
  return sign + a + " B";
}
const words = (name) => name.replace(/_/g, " ");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function fill(select, values, chosen) {
  select.replaceChildren(...values.map((v) => {
    const o = typeof v === "string" ? el("option", { value: v }, v) : el("option", { value: v.id }, v.label);
    if ((typeof v === "string" ? v : v.id) === chosen) o.selected = true;
    return o;
  }));
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const type = response.headers.get("Content-Type") || "";
  const payload = type.startsWith("application/json") ? await response.json() : await response.text();
  return { ok: response.ok, status: response.status, payload };
}

// An error the way the CLI prints it: `error:` then `hint:`.
function errorText(payload) {
  if (typeof payload !== "object" || !payload.error) return "error: " + String(payload);
  return "error: " + payload.error + (payload.hint ? "\nhint: " + payload.hint : "");
}

function whole(id) {
  const text = $(id).value.trim();
  return /^[0-9]+$/.test(text) ? Number(text) : text;
}

function request() {
  const body = {
    batch: whole("batch"),
    seq_len: whole("seq-len"),
    precision: $("precision").value,
    optimizer: $("optimizer").value,
    optimizer_impl: $("optimizer-impl").value,
    attention: $("attention").value,
    checkpointing: $("checkpointing").value,
    grad_accum: whole("grad-accum"),
    loss: $("loss").value,
    gpu: $("gpu").value === "custom" ? $("capacity").value : $("gpu").value,
  };
  if (config) body.config = config; else body.model = $("model").value;
  return body;
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(update, 120);
}

async function update() {
  const mine = ++sequence;
  const body = request();
  document.body.dataset.state = "busy";
  const [estimate, chart] = await Promise.all([post("/api/estimate", body), post("/api/estimate/svg", body)]);
  if (mine !== sequence) return;
  if (!estimate.ok) {
    $("estimate-error").textContent = errorText(estimate.payload);
    $("estimate-error").hidden = false;
    // No stale figures next to an error.
    $("answer").hidden = true;
    if (config && body.config) showConfigError(estimate.payload);
  } else {
    $("estimate-error").hidden = true;
    $("answer").hidden = false;
    show(estimate.payload);
    $("timeline").innerHTML = chart.ok ? chart.payload : "";
  }
  document.body.dataset.state = "idle";
  document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
}

function show(e) {
  const byName = Object.fromEntries(options.components.map((c) => [c.name, c]));
  const parts = options.components.map((c) => [c.name, e.components[c.name] || 0]).filter(([, b]) => b > 0);
  const capacity = e.capacity_bytes;
  const peak = e.peak_allocated_bytes ?? e.model_states_bytes;
  const scale = Math.max(peak, capacity || 0) * 1.04;

  $("headline").textContent = `${e.model ?? e.parameters + " parameters"} · batch ${e.setup.micro_batch} × ${e.setup.seq_len} tokens · ${e.setup.precision} · ${e.setup.optimizer} · ${e.setup.attention} attention · checkpointing ${e.setup.checkpointing}` + (e.setup.grad_accum > 1 ? ` · ${e.setup.grad_accum} micro-batches accumulated` : "");
  const warnings = e.warnings || [];
  $("warnings").replaceChildren(...warnings.map((w) => el("li", {}, "warning: " + w)));
  $("warnings").hidden = warnings.length === 0;
  setFigure("peak", peak, bytes(peak));
  $("peak-phase").textContent = e.peak_phase ? words(e.peak_phase) : "model states only";
  setFigure("capacity-out", capacity ?? "", capacity === undefined ? "no GPU" : bytes(capacity));
  $("fits").textContent = e.fits === undefined ? "—" : e.fits ? `yes, ${bytes(e.headroom_bytes)} headroom` : `no, ${bytes(-e.headroom_bytes)} short`;
  $("fits").className = e.fits === undefined ? "" : e.fits ? "yes" : "no";
  setFigure("max-batch", e.max_micro_batch ?? "", e.max_micro_batch === undefined || e.max_micro_batch === null ? "—" : String(e.max_micro_batch));

  const bar = $("bar");
  bar.dataset.peak = String(peak);
  bar.dataset.capacity = capacity === undefined ? "" : String(capacity);
  bar.replaceChildren(...parts.map(([name, b]) => {
    const seg = el("div", { class: "segment", "data-component": name, "data-bytes": String(b), title: `${words(name)}: ${bytes(b)}` });
    seg.style.width = (100 * b / scale).toFixed(3) + "%";
    seg.style.background = byName[name].colour;
    return seg;
  }));
  bar.setAttribute("aria-label", `peak ${bytes(peak)}` + (capacity === undefined ? "" : ` of ${bytes(capacity)} usable`));
  if (capacity !== undefined) {
    const mark = el("div", { class: "capacity" }, el("span", {}, `capacity ${bytes(capacity)}`));
    const at = 100 * capacity / scale;
    mark.style.left = at.toFixed(3) + "%";
    // Keep the label inside the bar near either end.
    mark.firstChild.className = at > 80 ? "end" : at < 20 ? "start" : "";
    bar.append(mark);
  }
  $("components").tBodies[0].replaceChildren(...parts.map(([name, b]) => {
    const swatch = el("span", { class: "swatch", "aria-hidden": "true" });
    swatch.style.background = byName[name].colour;
    return el("tr", { "data-component": name }, el("td", {}, swatch, words(name)), el("td", { class: "bytes", "data-bytes": String(b) }, bytes(b)));
  }));
  const phases = e.phase_peaks ? options.phases.filter((p) => p in e.phase_peaks) : [];
  $("phases").hidden = phases.length === 0;
  $("phases").tBodies[0].replaceChildren(...phases.map((p) =>
    el("tr", { "data-phase": p }, el("td", {}, words(p)), el("td", { class: "bytes", "data-bytes": String(e.phase_peaks[p]) }, bytes(e.phase_peaks[p])))));
  $("timeline").hidden = !e.phase_peaks;
}

function setFigure(id, raw, text) {
  $(id).textContent = text;
  $(id).dataset.value = String(raw);
}

// A config.json or model TOML from the file picker or dropped on the box.
async function useConfig(file) {
  if (!file) return;
  config = { name: file.name, text: await file.text() };
  $("config-name").textContent = `config: ${file.name}`;
  $("config-status").hidden = false;
  $("model").disabled = true;
  $("drop-note").classList.remove("error");
  $("drop-note").textContent = `Using ${file.name} instead of the built-in model.`;
  schedule();
}

function showConfigError(payload) {
  $("drop-note").textContent = errorText(payload);
  $("drop-note").classList.add("error");
}

function clearConfig() {
  config = null;
  $("config-file").value = "";
  $("config-status").hidden = true;
  $("model").disabled = false;
  $("drop-note").classList.remove("error");
  $("drop-note").textContent = "Drop a config.json or model .toml anywhere on this box, or choose one.";
  schedule();
}

async function diagnose() {
  const out = $("doctor-output");
  const answer = await post("/api/doctor", { text: $("doctor-input").value });
  if (!answer.ok) {
    out.replaceChildren(el("p", { class: "error", role: "alert" }, errorText(answer.payload)));
    return;
  }
  // The doctor's JSON: {"schema_version", "inputs": [one analysis per input]}.
  const analyses = answer.payload.inputs;
  const diagnoses = [];
  for (const a of analyses) {
    for (const m of a.messages || []) diagnoses.push(...m.diagnoses);
    diagnoses.push(...(a.trend || []), ...(a.diagnoses || []));
  }
  out.replaceChildren(...(diagnoses.length ? diagnoses.map(diagnosisBox) : [el("p", {}, "Nothing to diagnose in this text.")]));
}

function diagnosisBox(d) {
  const evidence = el("dl", {});
  for (const item of d.evidence || []) evidence.append(el("dt", {}, item.label), el("dd", {}, item.value));
  const remedies = el("ul", {}, ...(d.remedies || []).map((r) => el("li", {}, el("code", {}, typeof r === "string" ? r : JSON.stringify(r)))));
  return el("article", { class: "diagnosis", "data-id": d.id }, el("h4", {}, d.title), evidence, el("p", {}, d.explanation),
    ...(d.remedies && d.remedies.length ? [el("p", {}, "Remedies, cheapest first:"), remedies] : []));
}

// The planner's JSON (`vramfit plan --format json`): the plans, or the closest misses, and
// every single change.
async function plan() {
  const out = $("plan-output");
  const body = request();
  const global = whole("global-batch");
  if (global !== "") body.global_batch = global;
  if ($("allow-lora").checked) body.allow = ["lora"];
  out.replaceChildren(el("p", {}, "Planning…"));
  document.body.dataset.planning = "true";
  const answer = await post("/api/plan", body);
  document.body.dataset.planning = "false";
  if (!answer.ok) {
    out.replaceChildren(el("p", { class: "error", role: "alert" }, errorText(answer.payload)));
    return;
  }
  const p = answer.payload;
  const fits = p.plans.length > 0;
  const rows = fits ? p.plans : p.closest;
  const changes = (plan) => plan.changes.filter((c) => c.lever !== "micro-batch").map((c) => `${c.lever}: ${c.to}`).join(", ") || "accumulation only";
  const table = el("table", { id: "plans" },
    el("caption", {}, fits ? `Plans, cheapest first (${p.candidates} setups searched)` : `Nothing fits; the closest setups (${p.candidates} searched)`),
    el("thead", {}, el("tr", {}, ...["#", "step time", "micro × accum", "device use", fits ? "headroom" : "over", "changes"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, ...rows.map((r, i) => el("tr", { "data-rank": String(i + 1) },
      el("td", {}, String(i + 1)),
      el("td", {}, r.relative_step_time.toFixed(2) + "×"),
      el("td", {}, `${r.micro_batch} × ${r.grad_accum} = ${r.global_batch}`),
      el("td", { class: "bytes", "data-bytes": String(r.device_used_bytes) }, bytes(r.device_used_bytes)),
      el("td", { class: "bytes" }, bytes(fits ? r.headroom_bytes : -r.headroom_bytes)),
      el("td", { class: "changes" }, changes(r))))));
  const remedies = el("ul", { id: "remedies" }, ...p.remedies.map((r) =>
    el("li", {}, `${r.change.lever} ${r.change.from} → ${r.change.to}: ${r.relative_step_time.toFixed(2)}× step time, saves ${bytes(r.saves_bytes)}${r.fits ? ", fits" : ""}`)));
  out.replaceChildren(table, el("h3", {}, "Every single change, cheapest first"), remedies);
}

async function lint() {
  const out = $("lint-output");
  const answer = await post("/api/lint", { source: $("lint-input").value });
  if (!answer.ok) {
    out.replaceChildren(el("p", { class: "error", role: "alert" }, errorText(answer.payload)));
    return;
  }
  // The linter's JSON: {"schema_version", "diagnostics": [...]}.
  const findings = answer.payload.diagnostics;
  out.replaceChildren(
    el("p", {}, findings.length === 0 ? "No memory mistakes found." : `Found ${findings.length} problem${findings.length === 1 ? "" : "s"}.`),
    ...findings.map((f) => el("article", { class: "finding", "data-code": f.code },
      el("h4", {}, `line ${f.location.row}:${f.location.column} · ${f.code} ${f.name}`),
      el("p", {}, f.message), el("p", { class: "note" }, "help: " + f.help))));
}

async function start() {
  const response = await fetch("/api/options");
  options = await response.json();
  fill($("model"), options.models, options.defaults.model);
  fill($("gpu"), [...options.gpus.map((g) => ({ id: g.id, label: g.name })), { id: "custom", label: "Other: type a capacity" }], options.defaults.gpu);
  fill($("precision"), options.precisions, options.defaults.precision);
  fill($("optimizer"), options.optimizers, options.defaults.optimizer);
  fill($("optimizer-impl"), options.optimizer_impls, options.defaults.optimizer_impl);
  fill($("attention"), options.attentions, options.defaults.attention);
  fill($("checkpointing"), options.checkpointing, options.defaults.checkpointing);
  fill($("loss"), options.losses, options.defaults.loss);

  $("setup").addEventListener("input", schedule);
  $("setup").addEventListener("change", schedule);
  $("setup").addEventListener("submit", (e) => { e.preventDefault(); schedule(); });
  $("gpu").addEventListener("change", () => { $("capacity-field").hidden = $("gpu").value !== "custom"; });
  $("config-file").addEventListener("change", (e) => { e.stopPropagation(); useConfig(e.target.files[0]); });
  $("config-clear").addEventListener("click", clearConfig);
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    useConfig(e.dataTransfer.files[0]);
  });
  $("doctor-run").addEventListener("click", diagnose);
  $("lint-run").addEventListener("click", lint);
  $("plan-run").addEventListener("click", plan);
  document.body.dataset.ready = "true";
  update();
}

start();
