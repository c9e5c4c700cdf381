// CompCap web demo: plain JavaScript over the public HTTP API, same origin only (ES modules: this one
// runs the image panel — samples, upload, caption, in-domain badge, per-word explanations — and starts
// the probes panel, probes.js, and the compare view, compare.js; common.js, models.js and samples.js
// are their kit).
// Every value that comes from the API is written with textContent, never as HTML.

import {
  $,
  api,
  ApiProblem,
  asProblem,
  busyButton,
  el,
  num,
  postJson,
  readBase64,
  showProblem,
} from "./common.js";
import { catalog, fillCaptionerOptions, fillRankerOptions } from "./models.js";
import { sampleFile, sampleImage, SAMPLES, sampleScene, sampleTitle } from "./samples.js";
import { addDefaultConfigs, initCompare } from "./compare.js";
import { fillProbeModels, initProbes, loadProbeKinds, loadProbes } from "./probes.js";

const KEY_STORE = "compcap.apiKey";
const METHOD_NAMES = {
  attention: "attention",
  saliency: "saliency",
  guided_backprop: "guided backprop",
  integrated_gradients: "integrated gradients",
};
const GROUNDING_DELTAS = ["0", "1", "3", "5", "inf"];
const state = {
  hooks: [],
  file: null,
  sample: null, // the sample the chosen image is (its scene graph goes with an explanation), else null
  previewUrl: null,
  captioned: null, // what the shown caption came from: { file, sample, options, caption, tokens, base64 }
  explainSeq: 0, // bumped by every caption and explanation: a late answer for an older one is dropped
  methods: null, // captioner -> its explanation methods (GET /v1/explain/methods), null: not known
};

// ---------------------------------------------------------------- readiness

async function checkReady() {
  const badge = $("ready");
  let body = null;
  try {
    const response = await fetch("readyz", { headers: { Accept: "application/json" } });
    body = await response.json();
  } catch {
    body = { status: "unreachable" };
  }
  badge.className = `badge ${body.status}`;
  if (body.status === "ready") {
    badge.textContent = `ready · ${body.backend || "backend"}`;
  } else if (body.status === "loading") {
    badge.textContent = "models loading…";
    setTimeout(checkReady, 1000);
  } else {
    badge.textContent = body.status === "failed" ? "models failed to load" : "server unreachable";
    badge.title = body.error || "GET /readyz";
    if (body.status !== "failed") setTimeout(checkReady, 3000);
  }
}

// ---------------------------------------------------------------- models and hooks

function currentCaptioner() {
  if (!catalog.models) return null;
  return catalog.models.captioners.find((c) => c.name === $("model").value) || null;
}

function fillRankers() {
  fillRankerOptions($("rerank"), currentCaptioner());
}

// what a user should know before trusting the captioner's captions: what it was trained on, the
// images it reads, whether its captions say when an image is unlike those
function modelNotice(c) {
  const t = c.training || {};
  const size = c.image ? `${c.image.width}×${c.image.height}` : "";
  const dataset = t.dataset || "";
  const sceneworld = /^sceneworld/i.test(dataset);
  let knows;
  let warning;
  if (c.source) {
    const held = (t.held_out_pairs || []).length;
    knows = `${c.name} is imported from the snapshot ${c.source} (${c.architecture}, reads ${size} images).`;
    warning =
      "What it was trained on is not recorded in this repository" +
      (t.held_out_declared ? ` (its import declared ${held} held-out pairs)` : "") +
      ": expect good captions only on images like its own training data.";
  } else {
    const count = /images=(\d+)/.exec(dataset);
    const images = t.images || (count ? Number(count[1]) : 0);
    const what = sceneworld ? "SceneWorld renders" : dataset || "its training images";
    knows =
      `${c.name} knows only ${what} at ${size}: trained here on ${t.split || "?"}` +
      (images ? ` (${images} images).` : ".");
    warning = sceneworld
      ? "Real photos and anything else unlike those renders get confident but wrong captions."
      : "Images unlike its training data get confident but wrong captions.";
  }
  const domain = c.domain_calibration
    ? `Each caption says whether its image looks like ${c.domain_calibration} (the in-domain badge).`
    : `No in-domain check: ${c.name} is not calibrated (compcap calibrate), so captions come without one.`;
  return { knows, warning, domain };
}

function describeModel() {
  const c = currentCaptioner();
  const info = $("model-info");
  if (!c) {
    info.textContent = "";
    return;
  }
  $("max_length").placeholder = `model's: ${c.max_length}`;
  const held = (c.training && c.training.held_out_pairs) || [];
  const pairs = held.map((p) => `${p.modifier} ${p.noun}`).join(", ");
  const cider = c.quality && c.quality.cider_d;
  const quality = typeof cider === "number" ? ` · CIDEr-D ${num(cider, 3)}` : "";
  const split = c.training && c.training.split ? ` · trained on ${c.training.split}` : "";
  const heldOut = pairs ? ` · held out: ${pairs}` : "";
  info.textContent = `${c.name}: ${c.architecture}${split}${quality}${heldOut}`;
  const notice = modelNotice(c);
  $("model-knows").textContent = notice.knows;
  $("model-warning").textContent = notice.warning;
  $("model-domain").textContent = notice.domain;
  $("model-notice").hidden = false;
}

async function loadModels() {
  const select = $("model");
  try {
    catalog.models = await api("v1/models");
  } catch (problem) {
    select.replaceChildren(el("option", "unavailable"));
    showProblem($("error"), problem, "GET /v1/models");
    return;
  }
  fillCaptionerOptions(select);
  fillRankers();
  describeModel();
  applyMethods();
  fillProbeModels();
  addDefaultConfigs();
}

function hookParamValue(raw, description) {
  const text = raw.trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    // not JSON: a list parameter takes comma-separated words, anything else the plain text
  }
  if (/^list\b/i.test(description)) {
    return text
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean)
      .map((s) => (/^-?\d+$/.test(s) ? Number(s) : s));
  }
  return text;
}

async function loadHooks() {
  const box = $("hooks");
  try {
    state.hooks = (await api("v1/hooks")).hooks;
  } catch (problem) {
    box.replaceChildren(el("p", `hooks unavailable: ${problem.message}`, "muted small"));
    return;
  }
  box.replaceChildren();
  for (const hook of state.hooks) {
    const row = el("div", null, "hook");
    const label = el("label", null, "hook-name");
    const check = document.createElement("input");
    check.type = "checkbox";
    check.dataset.hook = hook.name;
    label.append(check, el("code", hook.name), el("span", ` ${hook.description}`, "muted small"));
    const params = el("div", null, "hook-params");
    params.hidden = true;
    for (const [name, description] of Object.entries(hook.params || {})) {
      const field = el("label", null, "hook-param");
      const input = document.createElement("input");
      input.type = "text";
      input.dataset.param = name;
      input.dataset.description = description;
      input.placeholder = description;
      input.disabled = true;
      input.spellcheck = false;
      field.append(el("code", name), input);
      params.append(field);
    }
    check.addEventListener("change", () => {
      params.hidden = !check.checked;
      for (const input of params.querySelectorAll("input")) input.disabled = !check.checked;
    });
    row.append(label, params);
    box.append(row);
  }
}

function chosenHooks() {
  const hooks = [];
  for (const row of $("hooks").querySelectorAll(".hook")) {
    const check = row.querySelector("input[type=checkbox]");
    if (!check || !check.checked) continue;
    const params = {};
    for (const input of row.querySelectorAll("input[data-param]")) {
      const value = hookParamValue(input.value, input.dataset.description || "");
      if (value !== undefined) params[input.dataset.param] = value;
    }
    hooks.push({ name: check.dataset.hook, params });
  }
  return hooks;
}

// ---------------------------------------------------------------- image input

function setFile(file, sample = null) {
  if (!file) return;
  state.file = file;
  state.sample = sample;
  for (const button of $("samples").querySelectorAll("button")) {
    button.setAttribute("aria-pressed", String(Boolean(sample) && button.dataset.sample === sample.file));
  }
  if (state.previewUrl) URL.revokeObjectURL(state.previewUrl);
  state.previewUrl = URL.createObjectURL(file);
  const preview = $("preview");
  preview.hidden = false;
  preview.alt = `preview of ${file.name}`;
  preview.src = state.previewUrl;
  $("drop").classList.add("has-image");
  const size = file.size < 1024 ? `${file.size} B` : `${(file.size / 1024).toFixed(1)} KiB`;
  $("file-info").textContent = `${file.name || "pasted image"} · ${size} · ${file.type || "unknown type"}`;
}

function wireImageInput() {
  const drop = $("drop");
  const preview = $("preview");
  $("file").addEventListener("change", (event) => setFile(event.target.files[0]));
  preview.addEventListener("error", () => {
    if (!state.file) return;
    preview.hidden = true;
    $("drop").classList.remove("has-image");
    $("file-info").textContent += " · no preview (the server decides whether it is an image)";
  });
  for (const type of ["dragenter", "dragover"]) {
    drop.addEventListener(type, (event) => {
      event.preventDefault();
      drop.classList.add("dragging");
    });
  }
  for (const type of ["dragleave", "dragend"]) {
    drop.addEventListener(type, () => drop.classList.remove("dragging"));
  }
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("dragging");
    const files = event.dataTransfer && event.dataTransfer.files;
    if (files && files.length) setFile(files[0]);
  });
  // a drop that misses the zone must not navigate away from the page
  window.addEventListener("dragover", (event) => event.preventDefault());
  window.addEventListener("drop", (event) => event.preventDefault());
  document.addEventListener("paste", (event) => {
    const items = (event.clipboardData && event.clipboardData.files) || [];
    if (items.length) setFile(items[0]);
  });
}

// ---------------------------------------------------------------- sample images

function renderSamples() {
  const row = $("samples");
  row.replaceChildren();
  SAMPLES.forEach((sample, i) => {
    const button = el("button", null, "sample");
    button.type = "button";
    button.dataset.sample = sample.file;
    button.title = sampleTitle(sample, i);
    button.setAttribute("aria-pressed", "false");
    button.append(sampleImage(sample, i));
    button.addEventListener("click", () => captionSample(sample));
    row.append(button);
  });
}

async function captionSample(sample) {
  try {
    setFile(await sampleFile(sample), sample);
  } catch (problem) {
    const unreadable = () => new ApiProblem(0, "sample_unreadable", String(problem.message));
    const shown = problem instanceof ApiProblem ? problem : unreadable();
    showProblem($("error"), shown, "Sample image");
    return;
  }
  $("caption-form").requestSubmit();
}

// ---------------------------------------------------------------- captioning

// the caption options as the form holds them, text as typed ("" = the server's default)
function captionOptions() {
  const options = { model: $("model").value, rerank: $("rerank").value, hooks: chosenHooks() };
  for (const id of ["beam_size", "n_best", "max_length", "length_penalty", "rerank_weight"]) {
    options[id] = $(id).value.trim();
  }
  return options;
}

function captionForm(file, options) {
  const form = new FormData();
  form.append("image", file, file.name || "image");
  for (const [name, value] of Object.entries(options)) {
    if (name !== "hooks" && value) form.append(name, value);
  }
  if (options.hooks.length) form.append("hooks", JSON.stringify(options.hooks));
  return form;
}

function fillTable(table, captions, best) {
  const body = table.querySelector("tbody");
  body.replaceChildren();
  captions.forEach((c, i) => {
    const row = el("tr", null, c.text === best && i === 0 ? "best" : "");
    // each figure names itself (data-label): a narrow screen shows it under the caption, without the head
    const figure = (value, label) => {
      const cell = el("td", value, "num");
      cell.dataset.label = label;
      return cell;
    };
    row.append(
      el("td", i + 1, "num"),
      el("td", c.text, "text"),
      figure(num(c.logprob, 2), "log-prob"),
      figure(num(c.normalized_logprob, 3), "normalized"),
      figure(num(c.ranker_score, 3), "ranker score"),
      figure(c.beam_rank, "beam rank"),
    );
    body.append(row);
  });
}

function showTimings(timings, roundTripMs) {
  const list = $("timings");
  list.replaceChildren();
  const rows = [
    ["decode images", timings.decode_images],
    ["encode", timings.encode],
    ["decode (beam search)", timings.decode],
    ["re-rank", timings.rerank],
    ["total (server)", timings.total],
    ["round trip (browser)", roundTripMs],
  ];
  const scale = Math.max(...rows.map(([, v]) => (typeof v === "number" ? v : 0)), 1e-9);
  for (const [name, value] of rows) {
    const bar = el("span", null, "bar");
    bar.style.width = `${Math.max(0, Math.min(100, (100 * (value || 0)) / scale))}%`;
    const dd = el("dd");
    dd.append(el("span", `${num(value, 1)} ms`, "ms"), el("span", null, "track"));
    dd.lastChild.append(bar);
    list.append(el("dt", name), dd);
  }
}

function showResult(out, roundTripMs) {
  const result = out.results[0];
  $("caption").textContent = result.caption || "(empty caption)";
  const hooks = out.hooks.length ? out.hooks.join(", ") : "none";
  $("request-summary").textContent =
    `model ${out.model} · ranker ${out.ranker || "none"} · beam ${out.beam_size} · n-best ${out.n_best}` +
    ` · max length ${out.max_length} · length penalty ${out.length_penalty}` +
    ` · re-rank weight ${out.rerank_weight} · hooks: ${hooks}`;
  showDomain(result);
  fillTable($("nbest"), result.captions, result.caption);
  $("order-note").textContent = out.ranker
    ? `Ordered by the ranker ${out.ranker}` +
      (out.rerank_weight > 0
        ? `: ranker score + ${out.rerank_weight} × normalized log-prob.`
        : ": ranker score alone (re-rank weight 0).")
    : "Ordered by normalized log-prob (no re-ranking).";
  const original = $("original");
  if (Array.isArray(result.original_captions)) {
    $("original-caption").textContent = result.original_caption || "(empty caption)";
    fillTable($("original-nbest"), result.original_captions, result.original_caption);
    original.hidden = false;
  } else {
    original.hidden = true;
  }
  showTimings(out.timings_ms, roundTripMs);
  resetExplain(Boolean(result.caption));
  $("placeholder").hidden = true;
  $("result").hidden = false;
}

// the caption's in_domain flag (null: the captioner is not calibrated)
function showDomain(result) {
  const badge = $("domain-badge");
  const note = $("domain-note");
  const score = num(result.domain_score, 2);
  if (result.in_domain === true) {
    badge.className = "badge domain in";
    badge.textContent = "in domain";
    note.textContent = `typicality ${score} (at most 1: like the images this model was calibrated on)`;
  } else if (result.in_domain === false) {
    badge.className = "badge domain out";
    badge.textContent = "out of domain";
    note.textContent =
      `typicality ${score} (over 1): unlike the images this model knows — ` +
      "the caption is likely confident but wrong";
  } else {
    badge.className = "badge domain unknown";
    badge.textContent = "domain not checked";
    note.textContent = "this model is not calibrated (compcap calibrate): no in-domain flag";
  }
}

async function submitCaption(event) {
  event.preventDefault();
  const errorBox = $("error");
  errorBox.hidden = true;
  if (!state.file) {
    showProblem(errorBox, new ApiProblem(0, "no_image", "choose or drop an image first"), "Caption");
    return;
  }
  const idle = busyButton($("submit"), "Captioning…", "Caption");
  $("results-title").textContent = "Result";
  const file = state.file;
  const sample = state.sample;
  const options = captionOptions();
  state.captioned = null;
  state.explainSeq += 1;
  const started = performance.now();
  try {
    const out = await api("v1/captions", { method: "POST", body: captionForm(file, options) });
    const result = out.results[0];
    // the best caption's token ids: an explanation of exactly these tokens (a subword captioner's text
    // need not tokenize back to them)
    const best = result.captions.find((c) => c.text === result.caption);
    const tokens = best && Array.isArray(best.tokens) ? best.tokens : null;
    state.captioned = { file, sample, options, caption: result.caption, tokens, base64: null };
    showResult(out, performance.now() - started);
  } catch (problem) {
    $("result").hidden = true;
    $("placeholder").hidden = true;
    showProblem(errorBox, problem, "POST /v1/captions");
  } finally {
    idle();
  }
}

// ---------------------------------------------------------------- explanations

function resetExplain(hasCaption) {
  $("explain-result").hidden = true;
  $("word-maps").replaceChildren();
  $("explain-error").hidden = true;
  $("explain-status").textContent = hasCaption ? "" : "An empty caption has no words to explain.";
  const button = $("explain-submit");
  button.disabled = !hasCaption;
  button.textContent = "Explain words";
  applyMethods();
}

async function loadMethods() {
  try {
    const out = await api("v1/explain/methods");
    state.methods = Object.fromEntries(out.captioners.map((c) => [c.model, c.methods]));
    $("explain").hidden = false;
  } catch (problem) {
    state.methods = null; // not known (the feature left out, or a key needed): the API decides
    $("explain").hidden = problem.status === 404;
  }
  applyMethods();
}

// the captioner whose caption an explanation would explain: the shown caption's, else the chosen one
function explainModel() {
  const chosen = state.captioned ? state.captioned.options.model : $("model").value;
  return chosen || (catalog.models ? catalog.models.default_captioner : "");
}

// grey out the methods this captioner cannot run here, with the reason as tooltip and as a note
function applyMethods() {
  const select = $("explain_method");
  const known = state.methods && state.methods[explainModel()];
  const byName = new Map((known || []).map((m) => [m.name, m]));
  const reasons = new Map(); // reason -> the methods it greys out
  for (const option of select.options) {
    if (!option.dataset.label) option.dataset.label = option.textContent;
    const m = byName.get(option.value);
    if (m && !m.available) {
      option.disabled = true;
      option.textContent = `${METHOD_NAMES[m.name] || m.name} — unavailable here`;
      option.title = m.reason || m.code || "unavailable";
      const key = m.reason || m.code || "unavailable";
      reasons.set(key, [...(reasons.get(key) || []), METHOD_NAMES[m.name] || m.name]);
    } else {
      option.disabled = false;
      option.textContent = option.dataset.label;
      option.removeAttribute("title");
    }
  }
  const enabled = [...select.options].filter((o) => !o.disabled);
  if (select.selectedOptions[0] && select.selectedOptions[0].disabled && enabled.length) {
    select.value = enabled[0].value;
    $("explain-steps-field").hidden = select.value !== "integrated_gradients";
  }
  const note = $("explain-methods-note");
  note.replaceChildren();
  for (const [reason, names] of reasons) {
    note.append(el("span", `Greyed out: ${names.join(", ")} — ${reason}`, "method-reason"));
  }
  note.hidden = reasons.size === 0;
  if (!enabled.length) $("explain-submit").disabled = true;
}

// POST /v1/explain's JSON body: the caption's image (with its scene graph when it is a sample), its
// tokens (or text) and options, typed as JSON wants them
function explainBody(captioned, base64, scene) {
  const body = { image: base64, method: $("explain_method").value };
  if (captioned.tokens && captioned.tokens.length) body.tokens = captioned.tokens;
  else body.caption = captioned.caption;
  if (scene) body.scene_graph = scene;
  const o = captioned.options;
  if (o.model) body.model = o.model;
  if (o.rerank) body.rerank = o.rerank === "false" ? false : o.rerank;
  for (const id of ["beam_size", "n_best", "max_length", "length_penalty", "rerank_weight"]) {
    if (!o[id]) continue;
    const value = Number(o[id]);
    body[id] = Number.isFinite(value) ? value : o[id]; // not a number: the server names the field
  }
  if (o.hooks.length) body.hooks = o.hooks;
  if (body.method === "integrated_gradients") {
    const steps = $("explain_n_steps").value.trim();
    if (steps) body.n_steps = Number.isFinite(Number(steps)) ? Number(steps) : steps;
  }
  return body;
}

function wordFigure(word) {
  const item = el("li", null, "word-map");
  const figure = el("figure");
  if (word.overlay_png) {
    const img = document.createElement("img");
    img.src = `data:image/png;base64,${word.overlay_png}`;
    img.alt = word.word;
    img.title = `${word.word}: strongest in region ${word.argmax_region}`;
    figure.append(img);
  } else {
    figure.append(el("div", "no overlay", "no-overlay muted small"));
  }
  const caption = el("figcaption");
  const text = el("span", word.word, word.noun ? "word noun" : "word");
  caption.append(text);
  if (word.grounded === true || word.grounded === false) {
    const mark = el("span", word.grounded ? "✓" : "✗", word.grounded ? "mark good" : "mark bad");
    mark.setAttribute("aria-hidden", "true");
    caption.append(" ", mark, el("span", word.grounded ? " grounded" : " not grounded", "visually-hidden"));
  }
  const about = [];
  if (word.noun) about.push(word.noun === word.word ? "noun" : `noun: ${word.noun}`);
  if (typeof word.logprob === "number") about.push(`log p ${num(word.logprob, 2)}`);
  if (word.pointing === true || word.pointing === false) {
    const p = word.pointing_chance;
    const chance = typeof p === "number" ? ` (chance ${num(p, 2)})` : "";
    about.push(`pointing ${word.pointing ? "hit" : "miss"}${chance}`);
  }
  const under = word.under_argmax && word.under_argmax.labels;
  if (Array.isArray(under) && under.length) about.push(`under: ${under.join(", ")}`);
  if (about.length) caption.append(el("span", about.join(" · "), "word-about muted"));
  figure.append(caption);
  item.append(figure);
  return item;
}

function showExplanation(out, roundTripMs) {
  const t = out.timings_ms || {};
  const method = METHOD_NAMES[out.method] || out.method;
  const source = out.source === "client" ? "the caption shown" : "the engine's caption";
  const ms = (value) => `${num(value, typeof value === "number" && value < 10 ? 2 : 1)} ms`;
  $("explain-summary").textContent =
    `${method} · model ${out.model} · ${out.words.length} words of ${source}` +
    ` · ${ms(t.per_word)} per word (maps ${ms(t.maps)}, caption ${ms(t.caption)},` +
    ` render ${ms(t.render)}) · round trip ${ms(roundTripMs)}`;
  const grounding = $("grounding");
  if (out.grounding_score) {
    // each δ's score with its 95% bootstrap interval over the caption's nouns (grounding_score_interval)
    const intervals = out.grounding_score_interval || {};
    grounding.replaceChildren(el("strong", "GroundingScore(δ)"));
    let nouns = null;
    for (const delta of GROUNDING_DELTAS) {
      const label = delta === "inf" ? "∞" : delta;
      const iv = intervals[delta];
      const bounds = iv ? ` [${num(iv.low, 3)}, ${num(iv.high, 3)}]` : "";
      const item = el("span", `δ=${label}: ${num(out.grounding_score[delta], 3)}${bounds}`, "delta");
      if (iv) {
        item.title = `95% bootstrap interval over the caption's ${iv.nouns} noun${iv.nouns === 1 ? "" : "s"}`;
        nouns = iv.nouns;
      }
      grounding.append(item);
    }
    if (nouns !== null) {
      const note = `[95% interval over ${nouns} noun${nouns === 1 ? "" : "s"}]`;
      grounding.append(el("span", note, "muted ci-note"));
    }
  } else if (out.scene_graph) {
    grounding.replaceChildren(el("span", "No noun in the caption: no GroundingScore.", "muted"));
  } else {
    const why = "No scene graph for this image: no GroundingScore or pointing game (the samples have one).";
    grounding.replaceChildren(el("span", why, "muted"));
  }
  grounding.hidden = false;
  showPointing(out.words);
  const ig = out.integrated_gradients;
  $("explain-ig").hidden = !ig;
  if (ig) {
    $("explain-ig").textContent =
      `integrated gradients: ${ig.n_steps} steps, baseline ${ig.baseline}` +
      ` · mean relative completeness error ${num(ig.mean_relative_delta, 4)}`;
  }
  $("word-maps").replaceChildren(...out.words.map(wordFigure));
  $("explain-result").hidden = false;
}

// the pointing game over the caption's nouns that name an object of the scene: hits and the chance
// a random cell would hit
function showPointing(words) {
  const box = $("pointing");
  const played = words.filter((w) => w.pointing === true || w.pointing === false);
  if (!played.length) {
    box.hidden = true;
    return;
  }
  const hits = played.filter((w) => w.pointing).length;
  const chance = played.reduce((sum, w) => sum + (w.pointing_chance || 0), 0) / played.length;
  const nouns = played.length === 1 ? "noun" : "nouns";
  box.replaceChildren(
    el("strong", "Pointing game"),
    el("span", `${hits} of ${played.length} ${nouns} hit (chance ${num(chance, 2)})`, "hits"),
  );
  box.title = "a hit: the word's strongest cell has its centre inside a box of the object it names";
  box.hidden = false;
}

async function submitExplain() {
  const captioned = state.captioned;
  if (!captioned || !captioned.caption || $("explain_method").selectedOptions[0].disabled) return;
  const seq = ++state.explainSeq;
  const status = $("explain-status");
  const errorBox = $("explain-error");
  const method = METHOD_NAMES[$("explain_method").value] || $("explain_method").value;
  errorBox.hidden = true;
  const idle = busyButton($("explain-submit"), "Explaining…", "Explain words");
  status.textContent = `Explaining “${captioned.caption}” with ${method}…`;
  const started = performance.now();
  try {
    if (captioned.base64 === null) captioned.base64 = await readBase64(captioned.file, "the image file");
    const scene = captioned.sample ? await sampleScene(captioned.sample) : null;
    const out = await postJson("v1/explain", explainBody(captioned, captioned.base64, scene));
    if (seq !== state.explainSeq) return;
    showExplanation(out, performance.now() - started);
    const done = METHOD_NAMES[out.method] || out.method;
    status.textContent = `Explained ${out.words.length} words with ${done}.`;
  } catch (problem) {
    if (seq !== state.explainSeq) return;
    $("explain-result").hidden = true;
    showProblem(errorBox, asProblem(problem), "POST /v1/explain");
    status.textContent = "The explanation failed.";
  } finally {
    if (seq === state.explainSeq) idle();
  }
}

// ---------------------------------------------------------------- start

function start() {
  const key = $("api_key");
  try {
    key.value = sessionStorage.getItem(KEY_STORE) || "";
  } catch {
    // storage may be disabled; the key then lives in the field only
  }
  let keyTimer = null;
  key.addEventListener("input", () => {
    try {
      sessionStorage.setItem(KEY_STORE, key.value);
    } catch {
      // ignored, as above
    }
    clearTimeout(keyTimer);
    keyTimer = setTimeout(() => {
      loadProbes();
      loadProbeKinds();
      loadMethods();
    }, 400);
  });
  wireImageInput();
  $("model").addEventListener("change", () => {
    fillRankers();
    describeModel();
  });
  $("caption-form").addEventListener("submit", submitCaption);
  $("explain-submit").addEventListener("click", submitExplain);
  $("explain_method").addEventListener("change", () => {
    $("explain-steps-field").hidden = $("explain_method").value !== "integrated_gradients";
  });
  initProbes();
  initCompare();
  renderSamples();
  checkReady();
  loadModels();
  loadHooks();
  loadMethods();
  loadProbes();
  loadProbeKinds();
}

start(); // a module runs once the document is parsed
