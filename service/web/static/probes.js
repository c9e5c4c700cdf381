// The probes panel of the demo page: a launcher (kind, model, images → POST /v1/probes, then
// GET /v1/probes/{id} until it ends, with its progress), Recall@K per concept pair drawn as an SVG chart
// (held out against seen, or every pair when the captioner's held-out pairs are not known) and the
// recent jobs with their headline figures (GET /v1/probes).

import {
  $,
  api,
  captionerNamed,
  catalog,
  el,
  fillCaptionerOptions,
  fillRankerOptions,
  num,
  rerankValue,
  showProblem,
} from "./common.js";

const run = {
  kinds: [], // GET /v1/probe-kinds
  sets: [], // GET /v1/probe-sets
  job: null, // the id of the job the launcher follows
  poll: null,
  result: null, // the systematicity result the chart shows
  sized: null, // the last finished systematicity result: the sizing rule's rate
  listTimer: null,
};

// ---------------------------------------------------------------- recent jobs

function when(seconds) {
  if (typeof seconds !== "number") return "—";
  return new Date(seconds * 1000).toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export async function loadProbes() {
  const errorBox = $("probes-error");
  const body = $("probe-table").querySelector("tbody");
  clearTimeout(run.listTimer);
  let jobs;
  try {
    jobs = (await api("v1/probes")).jobs;
  } catch (problem) {
    body.replaceChildren();
    $("probe-table").hidden = true;
    const empty = $("probes-empty");
    if (problem.status === 401) {
      // keys are configured and none was given yet: a note, not an alarm
      errorBox.hidden = true;
      empty.textContent = "The probe endpoints need an API key: enter it under “API key”.";
      empty.hidden = false;
    } else {
      empty.hidden = true;
      showProblem(errorBox, problem, "GET /v1/probes");
    }
    return;
  }
  errorBox.hidden = true;
  $("probes-empty").textContent = "No probe jobs yet.";
  $("probes-empty").hidden = jobs.length > 0;
  $("probe-table").hidden = jobs.length === 0;
  const rows = jobs.map((job) => {
    const row = el("tr");
    const link = el("a", job.id);
    link.href = `v1/probes/${encodeURIComponent(job.id)}`;
    const idCell = el("td", null, "nowrap");
    idCell.append(link);
    const p = job.params || {};
    const ranker = p.rerank === false || p.rerank === null ? "no ranker" : p.rerank;
    // each kind's one-line summary comes from the gateway (its probe-kind record)
    const shown = job.status === "running" && job.summary ? `so far: ${job.summary}` : job.summary || "";
    const figures = el("td", job.error || shown, job.error ? "figures error-text" : "figures");
    row.append(
      idCell,
      el("td", job.kind),
      el("td", job.status, `status ${job.status}`),
      el("td", `${p.model ?? "—"} · ${ranker ?? "—"} · ${p.beam_size ?? "—"}`),
      el("td", `${job.progress.done}/${job.progress.total}`, "num"),
      figures,
      el("td", when(job.finished_at), "nowrap"),
    );
    return row;
  });
  body.replaceChildren(...rows);
  if (jobs.some((j) => j.status === "queued" || j.status === "running")) {
    run.listTimer = setTimeout(loadProbes, 3000);
  }
}

// ---------------------------------------------------------------- launcher

export function fillProbeModels() {
  if (!catalog.models) return;
  fillCaptionerOptions($("probe_model"), $("probe_model").value);
  fillRankerOptions($("probe_rerank"), captionerNamed($("probe_model").value));
}

function probeKind() {
  return run.kinds.find((k) => k.name === $("probe_kind").value) || null;
}

function probeSetOf(kind) {
  return kind ? run.sets.find((s) => s.kind === kind.probe_sets) || null : null;
}

// The sizing rule (service.evaluation.intervals.images_per_group with no spread between pairs): the
// images per pair that make the 95% interval of a mean over `pairs` pairs about ± `half`, when the
// rate is near `rate`: z² r (1 − r) / (G h²), rounded up.
export function imagesPerPair(half, pairs, rate) {
  const z = 1.959963984540054;
  const within = (rate * (1 - rate)) / pairs;
  return within === 0 ? 1 : Math.max(1, Math.ceil((within * z * z) / (half * half)));
}

function showSizing() {
  const kind = probeKind();
  const set = probeSetOf(kind);
  const node = $("probe-sizing");
  if (!kind || kind.name !== "systematicity" || !set || !Array.isArray(set.pairs) || !set.pairs.length) {
    node.textContent = "";
    return;
  }
  const last = run.sized && run.sized.held_out ? run.sized.held_out : null;
  const k = $("probe_k").value || "5";
  const seen = last && last.recall ? last.recall[k] : null;
  const pairs = last && last.pairs ? last.pairs : set.pairs.length;
  const known = typeof seen === "number";
  const rate = known ? Math.min(Math.max(seen, 0.01), 0.99) : 0.5;
  const n = imagesPerPair(0.05, pairs, rate);
  const basis = known ? `the last result's held-out Recall@${k}` : "worst case";
  node.textContent =
    `≈ ${n} images per pair for ± 5 points on the mean of ${pairs} ${last ? "held-out " : ""}pairs ` +
    `(rate ${num(rate, 2)}, ${basis})`;
  node.dataset.images = String(n);
}

function describeProbeKind() {
  const kind = probeKind();
  const set = probeSetOf(kind);
  if (!kind) {
    $("probe-about").textContent = "";
    return;
  }
  const pairs = set && Array.isArray(set.pairs) ? `, ${set.pairs.length} pairs` : "";
  $("probe-about").textContent = set
    ? `${kind.name}: ${kind.description}. Probe set ${set.name}: ${set.images} images${pairs}.`
    : `${kind.name}: ${kind.description}. This repository has no probe set for it (compcap probesets).`;
  $("probe-run").disabled = !set || run.job !== null;
  showSizing();
}

export async function loadProbeKinds() {
  const select = $("probe_kind");
  let kinds;
  let sets;
  try {
    [kinds, sets] = await Promise.all([api("v1/probe-kinds"), api("v1/probe-sets")]);
  } catch (problem) {
    select.replaceChildren(el("option", "unavailable"));
    $("probe-run").disabled = true;
    $("probe-about").textContent =
      problem.status === 404
        ? "This gateway does not serve probes (COMPCAP_FEATURES)."
        : problem.status === 401
          ? "Running probes needs an API key: enter it under “API key”."
          : `Probe kinds unavailable: ${problem.message}`;
    return;
  }
  run.kinds = kinds.kinds;
  run.sets = sets.probe_sets;
  const previous = select.value;
  select.replaceChildren();
  for (const kind of run.kinds) {
    const has = run.sets.some((s) => s.kind === kind.probe_sets);
    const option = el("option", has ? kind.name : `${kind.name} — no probe set here`);
    option.value = kind.name;
    option.disabled = !has;
    select.append(option);
  }
  const usable = [...select.options].filter((o) => !o.disabled).map((o) => o.value);
  select.value = usable.includes(previous) ? previous : usable[0] || run.kinds[0]?.name || "";
  describeProbeKind();
}

function probeBody() {
  const body = { kind: $("probe_kind").value, model: $("probe_model").value };
  const rerank = rerankValue($("probe_rerank").value);
  if (rerank !== undefined) body.rerank = rerank;
  for (const [id, name] of [
    ["probe_images", "images"],
    ["probe_beam_size", "beam_size"],
  ]) {
    const text = $(id).value.trim();
    if (text) body[name] = Number.isFinite(Number(text)) ? Number(text) : text; // the server names a bad one
  }
  return body;
}

function probeRunning(running) {
  $("probe-run").disabled = running || !probeSetOf(probeKind());
  $("probe-run").textContent = running ? "Running…" : "Run probe";
  $("probe-cancel").hidden = !running;
}

async function runProbe(event) {
  event.preventDefault();
  const errorBox = $("probe-run-error");
  errorBox.hidden = true;
  clearTimeout(run.poll);
  let job;
  try {
    job = await api("v1/probes", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(probeBody()),
    });
  } catch (problem) {
    showProblem(errorBox, problem, "POST /v1/probes");
    return;
  }
  run.job = job.id;
  run.result = null;
  probeRunning(true);
  $("probe-chart").replaceChildren();
  $("probe-chart-head").hidden = true;
  showProbeJob(job);
  $("probe-live").hidden = false;
  loadProbes();
  pollProbe(job.id);
}

async function pollProbe(id) {
  let job;
  try {
    job = await api(`v1/probes/${encodeURIComponent(id)}`);
  } catch (problem) {
    if (run.job !== id) return;
    run.job = null;
    probeRunning(false);
    showProblem($("probe-run-error"), problem, "GET /v1/probes/{id}");
    return;
  }
  if (run.job !== id) return;
  showProbeJob(job);
  if (job.status === "queued" || job.status === "running") {
    run.poll = setTimeout(() => pollProbe(id), 400);
  } else {
    run.job = null;
    probeRunning(false);
    loadProbes();
  }
}

async function cancelProbe() {
  const id = run.job;
  if (!id) return;
  try {
    await api(`v1/probes/${encodeURIComponent(id)}`, { method: "DELETE" });
  } catch (problem) {
    showProblem($("probe-run-error"), problem, "DELETE /v1/probes/{id}");
  }
}

function showProbeJob(job) {
  const head = $("probe-job");
  const link = el("a", job.id);
  link.href = `v1/probes/${encodeURIComponent(job.id)}`;
  const p = job.params || {};
  const ranker = p.rerank === false || p.rerank === null ? "no ranker" : p.rerank;
  head.replaceChildren(
    link,
    ` · ${job.kind} · ${p.model ?? "—"} · ${ranker ?? "—"} · beam ${p.beam_size ?? "—"} · `,
    el("span", job.status, `status ${job.status}`),
  );
  const { done, total } = job.progress;
  const progress = $("probe-progress");
  progress.max = Math.max(total, 1);
  progress.value = done;
  $("probe-count").textContent = `${done}/${total} images`;
  const running = job.status === "running" || job.status === "queued";
  const summary = $("probe-summary");
  summary.className = job.error ? "small error-text" : "small";
  summary.textContent = job.error || (job.summary ? (running ? `so far: ${job.summary}` : job.summary) : "");
  const result = job.result || job.partial;
  if (result && Array.isArray(result.pairs)) {
    run.result = result;
    drawRecall();
  }
  if (job.result && job.result.held_out) {
    run.sized = job.result; // the sizing rule's rate comes from the last finished result
    showSizing();
  }
}

// ---------------------------------------------------------------- the held-out vs seen chart

function svg(tag, attrs, text) {
  const node = document.createElementNS($("svg-ns").namespaceURI, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function fillKs(ks) {
  const select = $("probe_k");
  const previous = select.value;
  const values = ks.map(String);
  if ([...select.options].map((o) => o.value).join() !== values.join()) {
    select.replaceChildren(
      ...values.map((k) => {
        const option = el("option", k);
        option.value = k;
        return option;
      }),
    );
  }
  select.value = values.includes(previous) ? previous : values[values.length - 1];
}

function legend(known) {
  const box = $("probe-legend");
  box.replaceChildren();
  const items = known
    ? [
        ["held", "held out: never together in training"],
        ["seen", "seen in training"],
      ]
    : [["all", "every pair (the model's held-out pairs are not known)"]];
  for (const [cls, text] of items) {
    const item = el("span", null, "legend-item");
    item.append(el("span", null, `swatch ${cls}`), text);
    box.append(item);
  }
}

// Recall@K per concept pair, grouped held out / seen, under the two means (or, held-out pairs not
// known, every pair under the mean of all): a fraction in [0, 1] as a bar and as 0.263, with its 95%
// bootstrap interval (the result's recall_interval) as an error bar
function drawRecall() {
  const result = run.result;
  if (!result) return;
  fillKs(result.ks || [1, 2, 3, 4, 5]);
  const k = $("probe_k").value;
  const known = result.held_out_known !== false;
  legend(known);
  const value = (part) => (part && part.recall ? part.recall[k] : null);
  const interval = (owner) => (owner && owner.recall_interval ? owner.recall_interval[k] || null : null);
  const bounds = (iv) => (iv ? ` (95% interval ${num(iv.low, 3)}–${num(iv.high, 3)})` : "");
  const pairs = result.pairs || [];
  const groups = known
    ? [
        ["held", "held out", pairs.filter((r) => r.held_out), result.held_out],
        ["seen", "seen", pairs.filter((r) => !r.held_out), result.seen],
      ]
    : [["all", "all", pairs, result.all]];
  const rows = [];
  for (const [cls, label, members, part] of groups) {
    if (!members.length) continue;
    const iv = interval(part);
    const about = `${label} pairs: mean Recall@${k} ${num(value(part), 3)}${bounds(iv)}`;
    const name = `${label} · mean of ${members.length}`;
    rows.push({ kind: "mean", cls, label: name, value: value(part), iv, about });
  }
  for (const [cls, label, members] of groups) {
    if (!members.length) continue;
    rows.push({ kind: "gap" });
    rows.push({ kind: "group", label: `${label} pairs` });
    for (const r of members) {
      const hits = r.hits ? r.hits[k] : null;
      const images = r.images ? ` — ${hits} of ${r.images} images` : " — no images";
      const iv = interval(r);
      const about = `${r.pair} (${label}): Recall@${k} ${num(r.recall[k], 3)}${bounds(iv)}${images}`;
      rows.push({ kind: "pair", cls, label: r.pair, value: r.recall[k], iv, about });
    }
  }
  const W = 720;
  const x0 = 170;
  const x1 = 650;
  const rowH = 20;
  const top = 26;
  let y = top;
  const placed = rows.map((row) => {
    const at = y;
    y += row.kind === "gap" ? 8 : rowH;
    return { ...row, y: at };
  });
  const H = y + 6;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart-svg" });
  chart.append(svg("title", {}, `Recall@${k} per concept pair`));
  for (const tick of [0, 0.25, 0.5, 0.75, 1]) {
    const x = x0 + tick * (x1 - x0);
    chart.append(svg("line", { x1: x, x2: x, y1: top - 6, y2: H - 4, class: "grid" }));
    chart.append(svg("text", { x, y: 12, class: "tick", "text-anchor": "middle" }, tick));
  }
  for (const row of placed) {
    if (row.kind === "gap") continue;
    const mid = row.y + rowH / 2;
    if (row.kind === "group") {
      chart.append(svg("text", { x: 4, y: mid + 4, class: "group-label" }, row.label));
      continue;
    }
    const g = svg("g", { class: `row ${row.kind}`, "data-pair": row.kind === "pair" ? row.label : "" });
    g.append(svg("title", {}, row.about || `${row.label}: Recall@${k} ${num(row.value, 3)}`));
    g.append(svg("text", { x: x0 - 8, y: mid + 4, "text-anchor": "end", class: "label" }, row.label));
    const defined = typeof row.value === "number";
    const w = defined ? Math.max(row.value * (x1 - x0), row.value > 0 ? 1.5 : 0) : 0;
    const bar = { x: x0, y: row.y + 3, height: rowH - 6, rx: 3 };
    g.append(svg("rect", { ...bar, width: x1 - x0, class: "track" }));
    g.append(svg("rect", { ...bar, width: w, class: `bar ${row.cls}` }));
    if (row.iv && typeof row.iv.low === "number" && typeof row.iv.high === "number") {
      const xl = x0 + row.iv.low * (x1 - x0);
      const xh = x0 + row.iv.high * (x1 - x0);
      const ci = svg("g", { class: "ci", "data-low": row.iv.low, "data-high": row.iv.high });
      ci.append(svg("line", { x1: xl, x2: xh, y1: mid, y2: mid, class: "ci-bar" }));
      for (const x of [xl, xh]) {
        ci.append(svg("line", { x1: x, x2: x, y1: mid - 5, y2: mid + 5, class: "ci-cap" }));
      }
      g.append(ci);
    }
    g.append(svg("text", { x: x1 + 8, y: mid + 4, class: "value" }, defined ? num(row.value, 3) : "—"));
    chart.append(g);
  }
  $("probe-chart").replaceChildren(chart);
  $("probe-chart").setAttribute(
    "aria-label",
    `Recall@${k} per concept pair` + (known ? ", held out against seen" : ", every pair"),
  );
  $("probe-chart-head").hidden = false;
}

export function initProbes() {
  $("probes-refresh").addEventListener("click", loadProbes);
  $("probe-form").addEventListener("submit", runProbe);
  $("probe-cancel").addEventListener("click", cancelProbe);
  $("probe_kind").addEventListener("change", describeProbeKind);
  $("probe_model").addEventListener("change", () =>
    fillRankerOptions($("probe_rerank"), captionerNamed($("probe_model").value)),
  );
  $("probe_k").addEventListener("change", () => {
    drawRecall();
    showSizing();
  });
}
