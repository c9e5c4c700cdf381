// The probes panel of the demo page: a launcher (kind, model, images → POST /v1/probes, then
// GET /v1/probes/{id} until it ends, with its progress), the result's figure per pair drawn as an SVG
// chart in its kind's words (WORDING: systematicity's Recall@K, held out against seen or every pair when
// the captioner's held-out pairs are not known; a counterfactual result's hit@K on minimal pairs, the
// held-out value against its seen twin, and its top-1 outcome shares per miss class) and the recent
// jobs with their headline figures (GET /v1/probes).

import {
  $,
  api,
  captionerNamed,
  catalog,
  el,
  fillCaptionerOptions,
  fillRankerOptions,
  num,
  postJson,
  rerankValue,
  showProblem,
} from "./common.js";

const run = {
  kinds: [], // GET /v1/probe-kinds
  sets: [], // GET /v1/probe-sets
  job: null, // the id of the job the launcher follows
  poll: null,
  result: null, // the result the chart shows (systematicity or counterfactual: per-pair rates)
  kind: null, // its kind, which picks the chart's words (WORDING)
  sized: {}, // kind -> its last finished result: the sizing rule's rate and spread between pairs
  listTimer: null,
};
const SIZED_KINDS = new Set(["systematicity", "counterfactual"]); // results with per-pair hit rates

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

// The sizing rule, a copy of service.evaluation.intervals.images_per_group: the images per pair that
// make the 95% interval of a mean over `pairs` pairs about ± `half`, when the rate is near `rate` and
// the pairs' own rates spread with standard deviation `betweenSd`. From the variance of a mean of pair
// means, sd² / G + r (1 − r) / (G n): n = ⌈(r (1 − r) / G) / ((h / z)² − sd² / G)⌉; null when the
// spread alone is wider than ± `half` (more pairs are needed, not more images).
export function imagesPerPair(half, pairs, rate, betweenSd = 0) {
  const z = 1.959963984540054;
  const budget = (half / z) ** 2 - betweenSd ** 2 / pairs;
  const within = (rate * (1 - rate)) / pairs;
  if (within === 0) return 1;
  if (budget <= 0) return null;
  return Math.max(1, Math.ceil(within / budget));
}

// The spread between pairs from per-pair hit rates, a copy of service.evaluation.intervals.between_sd:
// the rates' variance (n − 1) less the mean binomial variance one pair's rate has from its own images
// (r (1 − r) / (n − 1), an unbiased estimate), at least 0 — its square root. 0 with fewer than 2 pairs.
export function betweenSd(rates, images) {
  const kept = rates.map((r, i) => [r, images[i]]).filter(([r, n]) => Number.isFinite(r) && n >= 1);
  if (kept.length < 2) return 0;
  const mean = kept.reduce((sum, [r]) => sum + r, 0) / kept.length;
  const spread = kept.reduce((sum, [r]) => sum + (r - mean) ** 2, 0) / (kept.length - 1);
  const noisy = kept.filter(([, n]) => n > 1);
  const within = noisy.length
    ? noisy.reduce((sum, [r, n]) => sum + (r * (1 - r)) / (n - 1), 0) / noisy.length
    : 0;
  return Math.sqrt(Math.max(spread - within, 0));
}

// the sizing rule's inputs from the last finished result of the kind: its held-out mean rate at K and
// the spread between its held-out pairs' rates (null: no such result)
function sizingBasis(kind, k) {
  const last = run.sized[kind];
  if (!last || !last.held_out || typeof last.held_out.recall?.[k] !== "number") return null;
  const rows = (last.pairs || []).filter((r) => r.held_out && r.images > 0 && r.recall);
  const rates = rows.map((r) => r.recall[k]);
  const images = rows.map((r) => r.images);
  return {
    pairs: last.held_out.pairs || rows.length,
    rate: last.held_out.recall[k],
    sd: betweenSd(rates, images),
    perPair: rows.length >= 2,
  };
}

function showSizing() {
  const kind = probeKind();
  const set = probeSetOf(kind);
  const node = $("probe-sizing");
  const sized = kind && SIZED_KINDS.has(kind.name);
  if (!sized || !set || !Array.isArray(set.pairs) || !set.pairs.length) {
    node.textContent = "";
    delete node.dataset.images;
    delete node.dataset.betweenSd;
    return;
  }
  const k = $("probe_k").value || "5";
  const basis = sizingBasis(kind.name, k);
  const pairs = basis ? basis.pairs : set.pairs.length;
  const rate = basis ? Math.min(Math.max(basis.rate, 0.01), 0.99) : 0.5;
  const sd = basis ? basis.sd : 0;
  const n = imagesPerPair(0.05, pairs, rate, sd);
  const words = wordingOf(kind.name);
  const why = basis
    ? `the last result's held-out ${words.figure}${k}` +
      (basis.perPair ? `, spread between pairs ${num(sd, 3)}` : "")
    : "worst case";
  node.textContent =
    n === null
      ? `the spread between pairs (${num(sd, 3)}) alone is wider than ± 5 points on the mean of ` +
        `${pairs} held-out pairs: more pairs are needed, not more images`
      : `≈ ${n} ${words.sizing} for ± 5 points on the mean of ${pairs} ${basis ? "held-out " : ""}pairs ` +
        `(rate ${num(rate, 2)}, ${why})`;
  node.dataset.images = n === null ? "" : String(n);
  node.dataset.betweenSd = String(sd);
}

function describeProbeKind() {
  const kind = probeKind();
  const set = probeSetOf(kind);
  if (!kind) {
    $("probe-about").textContent = "";
    return;
  }
  $("probe-images-label").textContent = wordingOf(kind.name).param;
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
    job = await postJson("v1/probes", probeBody());
  } catch (problem) {
    showProblem(errorBox, problem, "POST /v1/probes");
    return;
  }
  run.job = job.id;
  run.result = null;
  probeRunning(true);
  $("probe-chart").replaceChildren();
  $("probe-chart-head").hidden = true;
  $("probe-outcomes").replaceChildren();
  $("probe-outcomes").hidden = true;
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
    run.kind = job.kind;
    drawRecall();
  }
  if (job.result && job.result.held_out) {
    run.sized[job.kind] = job.result; // the sizing rule's rate comes from the last finished result
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

// What a result's figures are and what its two sides are called, per kind of probe (the kinds
// without a per-pair chart, substitutivity and productivity, show their summary line only):
// systematicity's Recall@K of concept pairs, held out (never together in training) against seen; a
// counterfactual result's hit rate at K on minimal pairs — a scene whose object has the held-out
// value against its seen twin, the same scene with a seen value — and its top-1 outcome shares per
// miss class. The launcher's images field, the sizing hint, the legend, the chart's figure, rows,
// titles and aria label all read it.
const WORDING = {
  systematicity: {
    figure: "Recall@",
    about:
      "Recall@K: the fraction of a concept pair's images whose top-K captions attach the pair; " +
      "each bar with its 95% interval.",
    param: "Images per pair",
    units: "images",
    sizing: "images per pair",
    chart: "per concept pair",
    versus: "held out against seen",
    sides: {
      held: { name: "held out", legend: "held out: never together in training", group: "held out pairs" },
      seen: { name: "seen", legend: "seen in training", group: "seen pairs" },
      all: {
        name: "all",
        legend: "every pair (the model's held-out pairs are not known)",
        group: "all pairs",
      },
    },
    rowLabel: (row) => row.pair,
    rowNote: () => "",
  },
  counterfactual: {
    figure: "hit@",
    about:
      "hit@K on minimal pairs: the share of a pair's minimal pairs whose top-K captions attach the " +
      "held-out pair to the scene with the held-out value, and the seen pair to its seen twin; " +
      "mean over pairs, each bar with its 95% interval.",
    param: "Minimal pairs per pair",
    units: "minimal pairs",
    sizing: "minimal pairs per pair",
    chart: "per held-out pair, on its minimal pairs",
    versus: "held-out value against its seen twin",
    sides: {
      held: {
        name: "held-out value",
        legend: "held-out value: a scene whose object has the unseen value",
        group: "held-out value, per pair",
      },
      seen: {
        name: "seen twin",
        legend: "seen twin: the same scene with a seen value",
        group: "seen twin, per pair",
      },
    },
    rowLabel: (row) => (row.held_out ? row.pair : `twin of ${row.pair}`),
    rowNote: (row) => {
      if (row.held_out || !row.value || typeof row.value !== "object") return "";
      const values = Object.entries(row.value).map(([value, n]) => `${value} ×${n}`);
      return values.length ? `, seen values ${values.join(", ")}` : "";
    },
  },
};

function wordingOf(kind) {
  return WORDING[kind] || WORDING.systematicity;
}

function legend(sides, words) {
  const box = $("probe-legend");
  box.replaceChildren();
  for (const cls of sides) {
    const item = el("span", null, "legend-item");
    item.append(el("span", null, `swatch ${cls}`), words.sides[cls].legend);
    box.append(item);
  }
}

const CHART = { W: 740, x0: 200, x1: 670, rowH: 20, top: 26 };

// A horizontal bar chart of fractions in [0, 1]: one row per bar (kind "mean", "pair" or "share",
// its class cls, label, value, 95% interval iv as an error bar, a title and data-* attributes), "group"
// rows as headings and "gap" rows as space
function barChart(rows, title) {
  const { W, x0, x1, rowH, top } = CHART;
  let y = top;
  const placed = rows.map((row) => {
    const at = y;
    y += row.kind === "gap" ? 8 : rowH;
    return { ...row, y: at };
  });
  const H = y + 6;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart-svg" });
  chart.append(svg("title", {}, title));
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
    const g = svg("g", { class: `row ${row.kind}`, ...(row.data || {}) });
    g.append(svg("title", {}, row.about));
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
  return chart;
}

function bounds(iv) {
  return iv && typeof iv.low === "number" ? ` (95% interval ${num(iv.low, 3)}–${num(iv.high, 3)})` : "";
}

// The result's figure at K per pair, grouped by side (held out / seen, or every pair when the
// held-out pairs are not known) under the sides' means: a fraction in [0, 1] as a bar and as 0.263,
// with its 95% bootstrap interval (the result's recall_interval) as an error bar
function drawRecall() {
  const result = run.result;
  if (!result) return;
  fillKs(result.ks || [1, 2, 3, 4, 5]);
  const k = $("probe_k").value;
  // a counterfactual result's sides are the set's (held-out value against seen), known either way
  const known = result.held_out_known !== false || Boolean(result.outcome_classes && result.seen);
  const words = wordingOf(run.kind);
  const fig = `${words.figure}${k}`;
  const sides = known ? ["held", "seen"] : ["all"];
  legend(sides, words);
  $("probe-figure").textContent = `${words.figure}K`;
  $("probe-chart-about").textContent = words.about;
  const value = (part) => (part && part.recall ? part.recall[k] : null);
  const interval = (owner) => (owner && owner.recall_interval ? owner.recall_interval[k] || null : null);
  const pairs = result.pairs || [];
  const groups = known
    ? [
        ["held", pairs.filter((r) => r.held_out), result.held_out],
        ["seen", pairs.filter((r) => !r.held_out), result.seen],
      ]
    : [["all", pairs, result.all]];
  const rows = [];
  for (const [cls, members, part] of groups) {
    if (!members.length) continue;
    const name = words.sides[cls].name;
    const iv = interval(part);
    const about = `${name}: mean ${fig} over ${members.length} pairs ${num(value(part), 3)}${bounds(iv)}`;
    const label = `${name} · mean of ${members.length}`;
    rows.push({ kind: "mean", cls, label, value: value(part), iv, about, data: { "data-pair": "" } });
  }
  for (const [cls, members] of groups) {
    if (!members.length) continue;
    const side = words.sides[cls];
    rows.push({ kind: "gap" });
    rows.push({ kind: "group", label: side.group });
    for (const r of members) {
      const hits = r.hits ? r.hits[k] : null;
      const units = r.images ? ` — ${hits} of ${r.images} ${words.units}` : ` — no ${words.units}`;
      const iv = interval(r);
      const label = words.rowLabel(r);
      const figure = `${fig} ${num(r.recall[k], 3)}${bounds(iv)}`;
      const about = `${label} (${side.name}${words.rowNote(r)}): ${figure}${units}`;
      rows.push({ kind: "pair", cls, label, value: r.recall[k], iv, about, data: { "data-pair": r.pair } });
    }
  }
  $("probe-chart").replaceChildren(barChart(rows, `${fig} ${words.chart}`));
  const sidesSaid = known ? words.versus : "every pair";
  $("probe-chart").setAttribute("aria-label", `${fig} ${words.chart}, ${sidesSaid}`);
  $("probe-chart-head").hidden = false;
  drawOutcomes(k, words);
}

// ---------------------------------------------------------------- counterfactual outcomes

const OUTCOME_NAMES = {
  hit: "hit",
  modifier_elsewhere: "modifier elsewhere",
  noun_missing: "noun missing",
  wrong_value: "wrong value",
  modifier_omitted: "modifier omitted",
};

function signed(value, digits) {
  return typeof value === "number" && value > 0 ? `+${num(value, digits)}` : num(value, digits);
}

function share(value, iv) {
  const cell = el("td", null, "num");
  cell.append(el("span", num(value, 3), "share"));
  if (iv && typeof iv.low === "number") {
    cell.append(" ", el("span", `[${num(iv.low, 3)}, ${num(iv.high, 3)}]`, "ci-text"));
    cell.dataset.low = String(iv.low);
    cell.dataset.high = String(iv.high);
  }
  return cell;
}

const SIDE_KEYS = [
  ["held_out", "held"],
  ["seen", "seen"],
];

// The top-1 outcome shares per class (hit and the four miss classes) as bars, the held-out value's
// and its seen twin's, each with its 95% interval as an error bar
function outcomesChart(result, classes, words) {
  const rows = [];
  for (const c of classes) {
    const name = OUTCOME_NAMES[c] || c;
    if (rows.length) rows.push({ kind: "gap" });
    rows.push({ kind: "group", label: name });
    for (const [side, cls] of SIDE_KEYS) {
      const part = result[side];
      const value = part.outcomes ? part.outcomes[c] : null;
      const iv = part.outcome_intervals ? part.outcome_intervals[c] : null;
      const label = words.sides[cls].name;
      const about = `${label}: ${name}, share of top-1 captions ${num(value, 3)}${bounds(iv)}`;
      const data = { "data-outcome": c, "data-side": side };
      rows.push({ kind: "share", cls, label, value, iv, about, data });
    }
  }
  const title = `top-1 outcome shares per class, ${words.versus}`;
  const chart = barChart(rows, title);
  const box = el("div", null, "chart outcomes-chart");
  box.setAttribute("role", "img");
  box.setAttribute("aria-label", `${title}, with 95% intervals`);
  box.append(chart);
  return box;
}

// The top-1 outcome shares of a counterfactual result (hit and the four miss classes), held-out value
// against seen twin: bars with their 95% intervals as error bars, then a table with each share, its
// interval and a stacked bar per side, and held-out − seen with its interval and permutation p-value
// (the result's `difference.outcomes`); hidden for other kinds
function drawOutcomes(k, words) {
  const box = $("probe-outcomes");
  const result = run.result;
  const classes = result && Array.isArray(result.outcome_classes) ? result.outcome_classes : null;
  if (!classes || !result.held_out || !result.seen) {
    box.replaceChildren();
    box.hidden = true;
    return;
  }
  const table = el("table", null, "outcomes-table");
  const head = el("tr");
  head.append(el("th", "top-1 caption"), el("th", "shares"));
  for (const c of classes) {
    const th = el("th", OUTCOME_NAMES[c] || c, `outcome ${c}`);
    th.scope = "col";
    head.append(th);
  }
  table.append(el("thead"));
  table.tHead.append(head);
  const body = el("tbody");
  for (const [side, cls] of SIDE_KEYS) {
    const label = words.sides[cls].name;
    const part = result[side];
    const row = el("tr", null, `side ${side}`);
    row.dataset.side = side;
    const name = el("th", `${label} · ${part.pairs} pairs`);
    name.scope = "row";
    const stack = el("span", null, "stack");
    stack.setAttribute("role", "img");
    const parts = [];
    for (const c of classes) {
      const value = part.outcomes ? part.outcomes[c] : null;
      const piece = el("span", null, `stack-part ${c}`);
      piece.style.width = `${Math.max(0, (value || 0) * 100)}%`;
      piece.dataset.outcome = c;
      piece.title = `${OUTCOME_NAMES[c] || c}: ${num(value, 3)}`;
      stack.append(piece);
      parts.push(`${OUTCOME_NAMES[c] || c} ${num(value, 3)}`);
    }
    stack.setAttribute("aria-label", `${label}: ${parts.join(", ")}`);
    const stackCell = el("td", null, "stack-cell");
    stackCell.append(stack);
    row.append(name, stackCell);
    for (const c of classes) {
      const iv = part.outcome_intervals ? part.outcome_intervals[c] : null;
      row.append(share(part.outcomes ? part.outcomes[c] : null, iv));
    }
    body.append(row);
  }
  const tests = result.difference && result.difference.outcomes ? result.difference.outcomes : {};
  const diff = el("tr", null, "side difference");
  diff.dataset.side = "difference";
  const diffName = el("th", `${words.sides.held.name} − ${words.sides.seen.name}`);
  diffName.scope = "row";
  diff.append(diffName, el("td", "paired over the minimal pairs", "muted small"));
  for (const c of classes) {
    const test = tests[c];
    const held = result.held_out.outcomes ? result.held_out.outcomes[c] : null;
    const seen = result.seen.outcomes ? result.seen.outcomes[c] : null;
    const both = typeof held === "number" && typeof seen === "number";
    const estimate = test ? test.difference.estimate : both ? held - seen : null;
    const cell = share(null, test ? test.difference : null);
    cell.querySelector(".share").textContent = signed(estimate, 3);
    if (test) {
      cell.append(el("span", `p = ${num(test.p_value, 3)}`, "p-value"));
      cell.dataset.p = String(test.p_value);
    }
    diff.append(cell);
  }
  body.append(diff);
  table.append(body);
  const recallTest = result.difference && result.difference.recall ? result.difference.recall[k] : null;
  const caption = el("caption", null, "small");
  caption.append(
    "Counterfactual minimal pairs: what each side's top-1 caption did — a hit, or a miss by class " +
      `(modifier on another object, noun missing, wrong value, modifier omitted) — as shares of ` +
      `${result.minimal_pairs} minimal pairs (mean over pairs, 95% interval).`,
  );
  if (recallTest) {
    const d = recallTest.difference;
    const text =
      ` ${words.figure}${k} ${words.sides.held.name} − ${words.sides.seen.name} ${signed(d.estimate, 3)}` +
      ` [${num(d.low, 3)}, ${num(d.high, 3)}], p = ${num(recallTest.p_value, 3)}.`;
    caption.append(el("span", text, "recall-test"));
  }
  table.prepend(caption);
  const wrap = el("div", null, "table-wrap");
  wrap.append(table);
  const heading = el("p", "Top-1 outcome shares per class, with their 95% intervals:", "muted small");
  box.replaceChildren(heading, outcomesChart(result, classes, words), wrap);
  box.hidden = false;
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
