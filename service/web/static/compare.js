// The compare view of the demo page: two or more configurations (a captioner and its re-ranking) and
// images (the samples, the user's own) → POST /v1/compare; each image's caption per configuration with
// the NGSM of the pair that disagrees most and its n-gram overlap per order (n = 1..4, what the NGSM is
// the geometric mean of), images most discrepant first as the API orders them.

import { $, ApiProblem, asProblem, busyButton, el, num, postJson, readBase64, showProblem } from "./common.js";
import { captionerNamed, catalog, fillCaptionerOptions, fillRankerOptions, rerankValue } from "./models.js";
import { sampleFile, sampleImage, SAMPLES, sampleTitle, sampleUrl } from "./samples.js";

const view = {
  uploads: [], // the user's own images: { file, url }
  seq: 0, // bumped by every comparison: a late answer for an older one is dropped
};

function compareRows() {
  return [...$("compare-configs").querySelectorAll(".compare-config")];
}

function autoName(model, rerank) {
  const captioner = captionerNamed(model);
  const own = (captioner && captioner.default_ranker) || "";
  const ranker = rerank === "" ? own : rerank === "false" ? "" : rerank;
  return ranker ? `${model}+${ranker}` : model;
}

function renameConfigs() {
  const used = new Set();
  for (const row of compareRows()) {
    const name = row.querySelector(".config-name");
    if (row.dataset.auto !== "1") {
      used.add(name.value);
      continue;
    }
    const model = row.querySelector(".config-model").value;
    const base = autoName(model, row.querySelector(".config-rerank").value);
    let candidate = base;
    for (let n = 2; used.has(candidate); n += 1) candidate = `${base}-${n}`;
    name.value = candidate;
    used.add(candidate);
  }
  const rows = compareRows();
  for (const row of rows) row.querySelector(".config-remove").disabled = rows.length <= 2;
}

function addConfig(model, rerank) {
  const row = el("div", null, "compare-config");
  row.dataset.auto = "1";
  const n = compareRows().length + 1;
  const nameField = el("label", "Name");
  const name = document.createElement("input");
  name.type = "text";
  name.className = "config-name";
  name.spellcheck = false;
  name.maxLength = 64;
  name.addEventListener("input", () => {
    row.dataset.auto = name.value.trim() ? "" : "1";
    if (!name.value.trim()) renameConfigs();
  });
  nameField.append(name);
  const modelField = el("label", "Model");
  const modelSelect = el("select", null, "config-model");
  fillCaptionerOptions(modelSelect, model);
  modelField.append(modelSelect);
  const rerankField = el("label", "Re-ranking");
  const rerankSelect = el("select", null, "config-rerank");
  fillRankerOptions(rerankSelect, captionerNamed(model));
  rerankSelect.value = rerank;
  rerankField.append(rerankSelect);
  modelSelect.addEventListener("change", () => {
    fillRankerOptions(rerankSelect, captionerNamed(modelSelect.value));
    renameConfigs();
  });
  rerankSelect.addEventListener("change", renameConfigs);
  const remove = el("button", "Remove", "config-remove");
  remove.type = "button";
  remove.setAttribute("aria-label", `remove configuration ${n}`);
  remove.addEventListener("click", () => {
    row.remove();
    renameConfigs();
  });
  row.append(nameField, modelField, rerankField, remove);
  $("compare-configs").append(row);
  renameConfigs();
}

export function addDefaultConfigs() {
  if (!catalog.models || compareRows().length) return;
  const names = catalog.models.captioners.map((c) => c.name);
  const first = catalog.models.default_captioner;
  const other = names.find((n) => n !== first);
  addConfig(first, "");
  if (other) addConfig(other, "");
  else addConfig(first, "false");
}

function renderCompareSamples() {
  const row = $("compare-samples");
  row.replaceChildren();
  SAMPLES.forEach((sample, i) => {
    const label = el("label", null, "sample-pick");
    const check = document.createElement("input");
    check.type = "checkbox";
    check.checked = true;
    check.dataset.sample = sample.file;
    label.title = sampleTitle(sample, i);
    label.append(check, sampleImage(sample, i));
    row.append(label);
  });
}

function setCompareUploads(files) {
  for (const upload of view.uploads) URL.revokeObjectURL(upload.url);
  view.uploads = [...files].map((file) => ({ file, url: URL.createObjectURL(file) }));
}

function configurationSpec(row) {
  const spec = {
    name: row.querySelector(".config-name").value.trim(),
    model: row.querySelector(".config-model").value,
  };
  const rerank = rerankValue(row.querySelector(".config-rerank").value);
  if (rerank !== undefined) spec.rerank = rerank;
  return spec;
}

async function submitCompare() {
  const errorBox = $("compare-error");
  errorBox.hidden = true;
  const seq = ++view.seq;
  const sources = []; // per image sent: { file, url, label }
  for (const check of $("compare-samples").querySelectorAll("input:checked")) {
    const sample = SAMPLES.find((s) => s.file === check.dataset.sample);
    sources.push({ sample, url: sampleUrl(sample), label: `sample ${sample.file}` });
  }
  for (const upload of view.uploads) {
    sources.push({ file: upload.file, url: upload.url, label: upload.file.name });
  }
  if (!sources.length) {
    showProblem(errorBox, new ApiProblem(0, "no_image", "pick a sample or choose an image"), "Compare");
    return;
  }
  const idle = busyButton($("compare-submit"), "Comparing…", "Compare");
  const started = performance.now();
  try {
    const images = [];
    for (const source of sources) {
      images.push(await readBase64(source.file || (await sampleFile(source.sample)), source.label));
    }
    const body = { images, configurations: compareRows().map(configurationSpec) };
    const out = await postJson("v1/compare", body);
    if (seq !== view.seq) return;
    showComparison(out, sources, performance.now() - started);
  } catch (problem) {
    if (seq !== view.seq) return;
    $("compare-result").hidden = true;
    showProblem(errorBox, asProblem(problem), "POST /v1/compare");
  } finally {
    if (seq === view.seq) idle();
  }
}

function ngsmMeter(value) {
  const track = el("span", null, "meter");
  const bar = el("span", null, "meter-bar");
  bar.style.width = `${Math.max(0, Math.min(1, value)) * 100}%`;
  track.append(bar);
  return track;
}

// the pair's NGSM_n per order (n = 1..4; null: neither caption has an n-gram that long) and, when the
// geometric mean is 0, the order that made it 0
function orderOverlaps(pair) {
  const box = el("p", null, "orders small");
  box.dataset.pair = `${pair.a}|${pair.b}`;
  const orders = Array.isArray(pair.orders) ? pair.orders : [];
  box.append(el("span", "n-gram overlap:", "muted"));
  orders.forEach((value, i) => {
    const cell = el("span", `${i + 1}-gram ${value === null ? "—" : num(value, 3)}`, "order");
    cell.dataset.n = String(i + 1);
    if (value === 0) cell.classList.add("zero");
    cell.title =
      value === null
        ? `neither caption has ${i + 1} words: left out of the mean`
        : `shared ${i + 1}-grams ÷ ${i + 1}-grams in either caption`;
    box.append(cell);
  });
  const zero = orders.findIndex((v) => v === 0);
  if (pair.ngsm === 0 && zero >= 0) {
    const shared = orders.some((v) => typeof v === "number" && v > 0);
    const why = `no shared ${zero + 1}-gram gives NGSM 0`;
    box.append(el("span", shared ? `${why}, though they share shorter n-grams` : why, "zero-why"));
  }
  return box;
}

function showComparison(out, sources, roundTripMs) {
  const names = out.configurations.map((c) => c.name);
  const resolved = out.configurations
    .map((c) => {
      const r = c.resolved;
      return `${c.name}: ${r.model}, beam ${r.beam_size}, ranker ${r.ranker || "none"}`;
    })
    .join(" · ");
  const decode = out.timings_ms && out.timings_ms.decode;
  $("compare-summary").textContent =
    `${out.images.length} images × ${names.length} configurations, most discrepant first (lowest NGSM)` +
    ` · decoded in ${num(decode, 0)} ms, round trip ${num(roundTripMs, 0)} ms · ${resolved}`;
  const list = $("compare-images");
  list.replaceChildren();
  for (const image of out.images) {
    const source = sources[image.index] || { url: "", label: `image ${image.index + 1}` };
    const item = el("li", null, "compare-image");
    item.dataset.index = String(image.index);
    item.dataset.minNgsm = String(image.min_ngsm);
    const img = document.createElement("img");
    img.src = source.url;
    img.alt = source.label;
    img.width = 96;
    img.height = 96;
    const body = el("div", null, "compare-body");
    const head = el("p", null, "compare-head");
    const [a, b] = image.most_discrepant_pair;
    const many = names.length > 2;
    const about = [source.label, `tie-break ${num(image.min_tie_break, 3)}`];
    if (many) about.push(`most discrepant: ${a} vs ${b}`);
    head.append(
      el("strong", `${many ? "min " : ""}NGSM ${num(image.min_ngsm, 3)}`, "ngsm"),
      ngsmMeter(image.min_ngsm),
      el("span", about.join(" · "), "muted small"),
    );
    head.title =
      "NGSM: geometric mean of the 1- to 4-gram overlaps (1 = the same caption; one overlap at 0 " +
      "makes it 0); the tie-break, their arithmetic mean, orders images of equal NGSM";
    const table = el("table", null, "compare-table");
    const tbody = el("tbody");
    for (const name of names) {
      const row = el("tr", null, many && image.most_discrepant_pair.includes(name) ? "discrepant" : "");
      row.append(el("th", name, "config"), el("td", image.captions[name] ?? "", "text"));
      tbody.append(row);
    }
    table.append(tbody);
    const lowest = image.pairs.find((p) => p.a === a && p.b === b) || image.pairs[0];
    body.append(head, table);
    if (lowest) body.append(orderOverlaps(lowest));
    if (image.pairs.length > 1) {
      const pairs = [...image.pairs].sort((p, q) => p.ngsm - q.ngsm || p.tie_break - q.tie_break);
      const overlaps = (p) => (p.orders || []).map((v) => (v === null ? "—" : num(v, 2))).join("/");
      const text = pairs.map((p) => `${p.a} · ${p.b}: ${num(p.ngsm, 3)} (${overlaps(p)})`).join("   ");
      body.append(el("p", text, "pairs muted small"));
    }
    item.append(img, body);
    list.append(item);
  }
  $("compare-result").hidden = false;
}

export function initCompare() {
  renderCompareSamples();
  $("compare-add").addEventListener("click", () => {
    if (catalog.models) addConfig(catalog.models.default_captioner, "");
  });
  $("compare-files").addEventListener("change", (event) => setCompareUploads(event.target.files));
  $("compare-submit").addEventListener("click", submitCompare);
}
