// The demo page's kit, shared by its views (app.js, probes.js, compare.js): the HTTP call with the
// API's error shape, DOM helpers, the sample images and the model selects filled from GET /v1/models.
// Every value that comes from the API is written with textContent, never as HTML.

export const $ = (id) => document.getElementById(id);

// what GET /v1/models answered (null until then): the selects of every view read it
export const catalog = { models: null };

// SceneWorld scenes of the held-out test world (lab/compcap_lab/studies/examples.py, 96×96 as rendered), shipped
// with the page, each with one of its reference captions and its scene graph (what lies where: sent with
// an explanation, it gives the grounding score and the pointing game)
const SAMPLE_DIR = "demo-static/samples/";
export const SAMPLES = [
  { file: "example_0.png", scene: "example_0.scene.json", reference: "a red horse on a lawn" },
  { file: "example_1.png", scene: "example_1.scene.json", reference: "a picture of two buses on a road" },
  { file: "example_2.png", scene: "example_2.scene.json", reference: "a plane in the sky" },
];
const sampleFiles = new Map(); // sample file name -> its File, once fetched
const sampleScenes = new Map(); // sample file name -> its scene graph, once fetched

// ---------------------------------------------------------------- HTTP

export class ApiProblem extends Error {
  constructor(status, code, message, details, retryAfter) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = Array.isArray(details) ? details : [];
    this.retryAfter = retryAfter;
  }
}

function authHeaders() {
  const key = $("api_key").value.trim();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

export async function api(path, init = {}) {
  let response;
  try {
    response = await fetch(path, {
      ...init,
      headers: { Accept: "application/json", ...authHeaders(), ...(init.headers || {}) },
    });
  } catch (err) {
    throw new ApiProblem(0, "network_error", `could not reach the server (${err.message})`);
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!response.ok) {
    const e = body && body.error;
    const retry = response.headers.get("Retry-After");
    if (e && typeof e.message === "string") {
      throw new ApiProblem(response.status, e.code || "error", e.message, e.details, retry);
    }
    const snippet = text.trim().slice(0, 300) || response.statusText || "no details";
    throw new ApiProblem(response.status, `http_${response.status}`, snippet, [], retry);
  }
  return body;
}

// ---------------------------------------------------------------- helpers

export function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

export function num(value, digits) {
  return typeof value === "number" && Number.isFinite(value) ? value.toFixed(digits) : "—";
}

export function showProblem(box, problem, context) {
  box.replaceChildren();
  const head = el("p", null, "error-head");
  const status = problem.status ? `${problem.status} ` : "";
  head.append(el("strong", `${context}: ${status}${problem.code}`));
  box.append(head, el("p", problem.message, "error-message"));
  const fields = problem.details.filter((d) => d && d.field && d.message !== problem.message);
  if (fields.length) {
    const list = el("ul", null, "error-details");
    for (const d of fields) list.append(el("li", `${d.field}: ${d.message}`));
    box.append(list);
  }
  const hints = [];
  if (problem.status === 401 || problem.status === 403) {
    hints.push("This endpoint needs an API key: open “API key” and enter a valid bearer token.");
  }
  if (problem.retryAfter) hints.push(`The server asks to retry after ${problem.retryAfter} s.`);
  for (const hint of hints) box.append(el("p", hint, "error-hint"));
  box.hidden = false;
}

// the file's bytes in base64; a file the browser cannot read is the page's problem, naming ``what``
export function readBase64(file, what) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.addEventListener("load", () => {
      const url = String(reader.result || "");
      resolve(url.slice(url.indexOf(",") + 1)); // drop the data: URL's prefix
    });
    reader.addEventListener("error", () => {
      const reason = (reader.error && reader.error.message) || "unreadable file";
      reject(new ApiProblem(0, "unreadable_file", `could not read ${what} (${reason})`));
    });
    reader.readAsDataURL(file);
  });
}

// POST a JSON body to the API
export function postJson(path, body) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
}

// an error as the API's problem shape: a page error (a bug, not an answer) as "page_error"
export function asProblem(error) {
  return error instanceof ApiProblem ? error : new ApiProblem(0, "page_error", String(error.message));
}

// a submit button while its request runs: disabled with ``label`` (e.g. "Comparing…"); the function it
// returns gives the button back with ``idle`` as its text
export function busyButton(button, label, idle) {
  button.disabled = true;
  button.textContent = label;
  return () => {
    button.disabled = false;
    button.textContent = idle;
  };
}

// ---------------------------------------------------------------- sample images

export function sampleUrl(sample) {
  return `${SAMPLE_DIR}${sample.file}`;
}

export async function sampleFile(sample) {
  if (!sampleFiles.has(sample.file)) {
    const response = await fetch(sampleUrl(sample));
    if (!response.ok) throw new ApiProblem(response.status, "sample_missing", `no sample ${sample.file}`);
    const blob = await response.blob();
    sampleFiles.set(sample.file, new File([blob], sample.file, { type: blob.type || "image/png" }));
  }
  return sampleFiles.get(sample.file);
}

// the sample's scene graph (SceneWorld's form, its boxes in the sample's pixels)
export async function sampleScene(sample) {
  if (!sampleScenes.has(sample.file)) {
    const response = await fetch(`${SAMPLE_DIR}${sample.scene}`);
    if (!response.ok) {
      throw new ApiProblem(response.status, "sample_missing", `no scene graph ${sample.scene}`);
    }
    sampleScenes.set(sample.file, await response.json());
  }
  return sampleScenes.get(sample.file);
}

export function sampleImage(sample, i) {
  const img = document.createElement("img");
  img.src = sampleUrl(sample);
  img.alt = `sample ${i + 1}: ${sample.reference}`;
  img.width = 72;
  img.height = 72;
  return img;
}

export function sampleTitle(sample, i) {
  return `SceneWorld test scene ${i + 1}; a reference caption: “${sample.reference}”`;
}

// ---------------------------------------------------------------- model selects

export function captionerNamed(name) {
  const models = catalog.models;
  if (!models) return null;
  return models.captioners.find((c) => c.name === (name || models.default_captioner)) || null;
}

// a captioner <select>, ``value`` chosen (default: the repository's default captioner)
export function fillCaptionerOptions(select, value) {
  const models = catalog.models;
  select.replaceChildren();
  for (const c of models.captioners) {
    const isDefault = c.name === models.default_captioner ? " (default)" : "";
    const option = el("option", `${c.name} — ${c.architecture}${isDefault}`);
    option.value = c.name;
    select.append(option);
  }
  select.value = value || models.default_captioner;
}

// a re-ranking <select>: the captioner's own ranker (""), none ("false") or any ranker by name
export function fillRankerOptions(select, captioner) {
  const previous = select.value;
  const own = captioner && captioner.default_ranker;
  select.replaceChildren();
  const dflt = el("option", own ? `default (its own: ${own})` : "default (none for this model)");
  dflt.value = "";
  const off = el("option", "none — plain beam search");
  off.value = "false";
  select.append(dflt, off);
  for (const r of catalog.models.rankers) {
    const joint = r.joint_with ? `, joint with ${r.joint_with}` : "";
    const option = el("option", `${r.name} — ${r.architecture}${joint}`);
    option.value = r.name;
    select.append(option);
  }
  select.value = [...select.options].some((o) => o.value === previous) ? previous : "";
}

// a re-ranking <select>'s value as the API takes it: undefined (the captioner's own), false or a name
export function rerankValue(value) {
  if (!value) return undefined;
  return value === "false" ? false : value;
}
