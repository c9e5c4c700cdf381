// The demo page's model selects, filled from what GET /v1/models answered (``catalog``), which every
// view reads.

import { el } from "./common.js";

// what GET /v1/models answered (null until then): the selects of every view read it
export const catalog = { models: null };

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
