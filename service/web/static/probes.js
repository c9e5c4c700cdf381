// The probes panel of the demo page: a launcher (kind, model, images → POST /v1/probes, then
// GET /v1/probes/{id} until it ends, with its progress), the result drawn as its kind's record says and
// the recent jobs with their headline figures (GET /v1/probes). No kind is named here: each kind's
// `view` (GET /v1/probe-kinds, service.probes.kinds.view) gives the launcher's words, the sizing hint's
// unit, a chart of one of two generic layouts — "sides" (a figure at K per row, grouped by side under
// the sides' means, e.g. held out against seen) or "bars" (one bar per entry of a mapping) — in its own
// words, and the shares of classes per side (a table and a chart, with the paired difference).

import { $, api, el, num, postJson, showProblem } from "./common.js";
import { captionerNamed, catalog, fillCaptionerOptions, fillRankerOptions, rerankValue } from "./models.js";

const run = {
  kinds: [], // GET /v1/probe-kinds
  sets: [], // GET /v1/probe-sets
  job: null, // the id of the job the launcher follows
  poll: null,
  result: null, // the result the chart shows
  kind: null, // its kind, whose view draws it
  sized: {}, // kind -> its last finished result: the sizing rule's rate and spread between pairs
  listTimer: null,
};

// A kind's view as its record has it (service.probes.kinds.view.KindView); {} for an unknown kind
function viewOf(name) {
  const kind = run.kinds.find((k) => k.name === name);
  return (kind && kind.view) || {};
}

// `template` with each {field} replaced by `owner`'s field ("twin of {pair}")
function fill(template, owner) {
  return template.replace(/\{(\w+)\}/g, (_, name) => String(owner[name] ?? ""));
}

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

// the sizing rule's inputs from the last finished result of the kind: the mean at K of its chart's
// first side (held out) and the spread between that side's rows' rates (null: no such result)
function sizingBasis(kind, chart, k) {
  const last = run.sized[kind];
  const held = last ? last[chart.sides[0].key] : null;
  if (!held || typeof held[chart.value]?.[k] !== "number") return null;
  const rows = (last[chart.rows] || []).filter(
    (r) => r[chart.side_field] && r[chart.size] > 0 && r[chart.value],
  );
  const rates = rows.map((r) => r[chart.value][k]);
  const images = rows.map((r) => r[chart.size]);
  return {
    pairs: held.pairs || rows.length,
    rate: held[chart.value][k],
    sd: betweenSd(rates, images),
    perPair: rows.length >= 2,
  };
}

function showSizing() {
  const kind = probeKind();
  const set = probeSetOf(kind);
  const node = $("probe-sizing");
  const view = kind ? viewOf(kind.name) : {};
  const chart = view.chart;
  const sized = Boolean(view.sizing) && chart && chart.layout === "sides";
  if (!sized || !set || !Array.isArray(set.pairs) || !set.pairs.length) {
    node.textContent = "";
    delete node.dataset.images;
    delete node.dataset.betweenSd;
    return;
  }
  const k = $("probe_k").value || "5";
  const basis = sizingBasis(kind.name, chart, k);
  const pairs = basis ? basis.pairs : set.pairs.length;
  const rate = basis ? Math.min(Math.max(basis.rate, 0.01), 0.99) : 0.5;
  const sd = basis ? basis.sd : 0;
  const n = imagesPerPair(0.05, pairs, rate, sd);
  const why = basis
    ? `the last result's held-out ${chart.figure}${k}` +
      (basis.perPair ? `, spread between pairs ${num(sd, 3)}` : "")
    : "worst case";
  node.textContent =
    n === null
      ? `the spread between pairs (${num(sd, 3)}) alone is wider than ± 5 points on the mean of ` +
        `${pairs} held-out pairs: more pairs are needed, not more images`
      : `≈ ${n} ${view.sizing} for ± 5 points on the mean of ${pairs} ${basis ? "held-out " : ""}pairs ` +
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
  $("probe-images-label").textContent = viewOf(kind.name).images || "Images per pair";
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
  const chart = viewOf(job.kind).chart;
  if (result && chart && drawable(chart, result)) {
    run.result = result;
    run.kind = job.kind;
    drawChart();
  }
  if (job.result && chart && chart.layout === "sides" && job.result[chart.sides[0].key]) {
    run.sized[job.kind] = job.result; // the sizing rule's rate comes from the last finished result
    showSizing();
  }
}

// ---------------------------------------------------------------- the chart

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

// Whether `result` holds what `chart` draws: rows ("sides") or a mapping of figures ("bars")
function drawable(chart, result) {
  const data = result[chart.layout === "sides" ? chart.rows : chart.value];
  return chart.layout === "sides" ? Array.isArray(data) : Boolean(data) && typeof data === "object";
}

function legend(sides) {
  const box = $("probe-legend");
  box.replaceChildren();
  for (const side of sides) {
    const item = el("span", null, "legend-item");
    item.append(el("span", null, `swatch ${side.css}`), side.legend);
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

// A row's note in its title: the side's `note` field (value -> count) after its `note_label`
function rowNote(side, row) {
  const values = side.note ? row[side.note] : null;
  if (!values || typeof values !== "object") return "";
  const listed = Object.entries(values).map(([value, n]) => `${value} ×${n}`);
  return listed.length ? `, ${side.note_label} ${listed.join(", ")}` : "";
}

// A "sides" chart's rows: the figure at K of each row of the result, grouped by side (the rows whose
// side field is true, then the others; every row under `every` when the result says its sides are not
// known) under the sides' means — a fraction in [0, 1] as a bar and as 0.263, with its 95% bootstrap
// interval (the figure's `_interval` sibling) as an error bar
function sidesRows(chart, result, k) {
  const every = Boolean(chart.every) && result[chart.known] === false;
  const [first, second] = chart.sides;
  const fig = `${chart.figure}${k}`;
  const value = (part) => (part && part[chart.value] ? part[chart.value][k] : null);
  const ivKey = `${chart.value}_interval`;
  const interval = (owner) => (owner && owner[ivKey] ? owner[ivKey][k] || null : null);
  const all = result[chart.rows] || [];
  const groups = every
    ? [[chart.every, all]]
    : [
        [first, all.filter((r) => r[chart.side_field])],
        [second, all.filter((r) => !r[chart.side_field])],
      ];
  const rows = [];
  for (const [side, members] of groups) {
    if (!members.length) continue;
    const part = result[side.key];
    const iv = interval(part);
    const mean = value(part);
    const about = `${side.name}: mean ${fig} over ${members.length} pairs ${num(mean, 3)}${bounds(iv)}`;
    const label = `${side.name} · mean of ${members.length}`;
    rows.push({ kind: "mean", cls: side.css, label, value: mean, iv, about, data: { "data-pair": "" } });
  }
  for (const [side, members] of groups) {
    if (!members.length) continue;
    rows.push({ kind: "gap" });
    rows.push({ kind: "group", label: side.group });
    for (const r of members) {
      const hits = r[chart.count] ? r[chart.count][k] : null;
      const size = r[chart.size];
      const units = size ? ` — ${hits} of ${size} ${chart.units}` : ` — no ${chart.units}`;
      const iv = interval(r);
      const label = fill(side.row, r);
      const figure = `${fig} ${num(r[chart.value][k], 3)}${bounds(iv)}`;
      const about = `${label} (${side.name}${rowNote(side, r)}): ${figure}${units}`;
      const data = { "data-pair": r[chart.label] };
      rows.push({ kind: "pair", cls: side.css, label, value: r[chart.value][k], iv, about, data });
    }
  }
  return { rows, sides: groups.map(([side]) => side), versus: every ? "every pair" : chart.versus };
}

// A "bars" chart's rows: one bar per entry of the result's mapping of figures, with its interval
function barsRows(chart, result) {
  const side = chart.sides[0];
  const intervals = result[`${chart.value}_interval`] || {};
  const rows = [{ kind: "group", label: side.group }];
  for (const [name, value] of Object.entries(result[chart.value])) {
    const iv = intervals[name] || null;
    const shown = typeof value === "number" ? value : null;
    const about = `${name} (${side.name}): ${chart.figure} ${num(shown, 3)}${bounds(iv)}`;
    const data = { "data-pair": name };
    rows.push({ kind: "pair", cls: side.css, label: name, value: shown, iv, about, data });
  }
  return { rows, sides: [side], versus: chart.versus };
}

// The result's chart in its kind's words, then its shares
function drawChart() {
  const result = run.result;
  if (!result) return;
  const view = viewOf(run.kind);
  const chart = view.chart;
  if (!chart) return;
  const atK = chart.layout === "sides";
  $("probe_k").hidden = !atK;
  if (atK) fillKs(result.ks || [1, 2, 3, 4, 5]);
  const k = $("probe_k").value;
  const drawn = atK ? sidesRows(chart, result, k) : barsRows(chart, result);
  const fig = atK ? `${chart.figure}${k}` : chart.figure;
  legend(drawn.sides);
  $("probe-figure").textContent = atK ? `${chart.figure}K` : chart.figure;
  $("probe-chart-about").textContent = chart.about;
  $("probe-chart").replaceChildren(barChart(drawn.rows, `${fig} ${chart.title}`));
  const said = drawn.versus ? `, ${drawn.versus}` : "";
  $("probe-chart").setAttribute("aria-label", `${fig} ${chart.title}${said}`);
  $("probe-chart-head").hidden = false;
  drawShares(k, view);
}

// ---------------------------------------------------------------- shares of classes per side

// a class's words: the view's, else its name with spaces
function className(shares, c) {
  return (shares.names && shares.names[c]) || c.replace(/_/g, " ");
}

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

// The shares per class as bars, each side's (the chart's two sides), each with its 95% interval as an
// error bar
function sharesChart(result, classes, shares, chart) {
  const rows = [];
  for (const c of classes) {
    const name = className(shares, c);
    if (rows.length) rows.push({ kind: "gap" });
    rows.push({ kind: "group", label: name });
    for (const side of chart.sides) {
      const part = result[side.key];
      const value = part[shares.value] ? part[shares.value][c] : null;
      const iv = part[shares.interval] ? part[shares.interval][c] : null;
      const about = `${side.name}: ${name}, ${shares.share} ${num(value, 3)}${bounds(iv)}`;
      const data = { "data-outcome": c, "data-side": side.key };
      rows.push({ kind: "share", cls: side.css, label: side.name, value, iv, about, data });
    }
  }
  const title = `${shares.title}, ${chart.versus}`;
  const box = el("div", null, "chart outcomes-chart");
  box.setAttribute("role", "img");
  box.setAttribute("aria-label", `${title}, with 95% intervals`);
  box.append(barChart(rows, title));
  return box;
}

// The shares of a result's classes (its view's `shares`: e.g. the top-1 outcomes, a hit and each miss
// class), one side against the other: bars with their 95% intervals as error bars, then a table with
// each share, its interval and a stacked bar per side, and the first side − the second with its
// interval and permutation p-value (the result's paired tests); hidden for a kind without shares
function drawShares(k, view) {
  const box = $("probe-outcomes");
  const result = run.result;
  const { shares, chart } = view;
  const classes = shares && result && Array.isArray(result[shares.classes]) ? result[shares.classes] : null;
  if (!classes || !chart || !chart.sides.every((side) => result[side.key])) {
    box.replaceChildren();
    box.hidden = true;
    return;
  }
  const [first, second] = chart.sides;
  const table = el("table", null, "outcomes-table");
  const head = el("tr");
  head.append(el("th", shares.column), el("th", "shares"));
  for (const c of classes) {
    const th = el("th", className(shares, c), `outcome ${c}`);
    th.scope = "col";
    head.append(th);
  }
  table.append(el("thead"));
  table.tHead.append(head);
  const body = el("tbody");
  for (const side of chart.sides) {
    const part = result[side.key];
    const values = part[shares.value] || null;
    const row = el("tr", null, `side ${side.key}`);
    row.dataset.side = side.key;
    const name = el("th", `${side.name} · ${part.pairs} pairs`);
    name.scope = "row";
    const stack = el("span", null, "stack");
    stack.setAttribute("role", "img");
    const parts = [];
    for (const c of classes) {
      const value = values ? values[c] : null;
      const piece = el("span", null, `stack-part ${c}`);
      piece.style.width = `${Math.max(0, (value || 0) * 100)}%`;
      piece.dataset.outcome = c;
      piece.title = `${className(shares, c)}: ${num(value, 3)}`;
      stack.append(piece);
      parts.push(`${className(shares, c)} ${num(value, 3)}`);
    }
    stack.setAttribute("aria-label", `${side.name}: ${parts.join(", ")}`);
    const stackCell = el("td", null, "stack-cell");
    stackCell.append(stack);
    row.append(name, stackCell);
    for (const c of classes) {
      const iv = part[shares.interval] ? part[shares.interval][c] : null;
      row.append(share(values ? values[c] : null, iv));
    }
    body.append(row);
  }
  const paired = result[shares.difference] || {};
  const tests = paired[shares.value] || {};
  const diff = el("tr", null, "side difference");
  diff.dataset.side = "difference";
  const diffName = el("th", `${first.name} − ${second.name}`);
  diffName.scope = "row";
  diff.append(diffName, el("td", shares.paired, "muted small"));
  for (const c of classes) {
    const test = tests[c];
    const held = result[first.key][shares.value] ? result[first.key][shares.value][c] : null;
    const seen = result[second.key][shares.value] ? result[second.key][shares.value][c] : null;
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
  const figureTest = paired[chart.value] ? paired[chart.value][k] : null;
  const caption = el("caption", null, "small");
  caption.append(fill(shares.caption, result));
  if (figureTest) {
    const d = figureTest.difference;
    const text =
      ` ${chart.figure}${k} ${first.name} − ${second.name} ${signed(d.estimate, 3)}` +
      ` [${num(d.low, 3)}, ${num(d.high, 3)}], p = ${num(figureTest.p_value, 3)}.`;
    caption.append(el("span", text, "recall-test"));
  }
  table.prepend(caption);
  const wrap = el("div", null, "table-wrap");
  wrap.append(table);
  const heading = el("p", shares.heading, "muted small");
  box.replaceChildren(heading, sharesChart(result, classes, shares, chart), wrap);
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
    drawChart();
    showSizing();
  });
}
