// The demo page's kit, shared by its views (app.js, probes.js, compare.js): the HTTP call with the
// API's error shape and the DOM helpers (samples.js: the sample images; models.js: the model selects).
// Every value that comes from the API is written with textContent, never as HTML.

export const $ = (id) => document.getElementById(id);

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
