// The demo page's sample images: SceneWorld test scenes shipped with the page, fetched once each.

import { ApiProblem } from "./common.js";

// SceneWorld scenes of the held-out test world (96×96 as rendered), each with one of its reference captions
// and its scene graph (what lies where: sent with an explanation, it gives the grounding score and the
// pointing game)
const SAMPLE_DIR = "demo-static/samples/";
export const SAMPLES = [
  { file: "example_0.png", scene: "example_0.scene.json", reference: "a red horse on a lawn" },
  { file: "example_1.png", scene: "example_1.scene.json", reference: "a picture of two buses on a road" },
  { file: "example_2.png", scene: "example_2.scene.json", reference: "a plane in the sky" },
];
const sampleFiles = new Map(); // sample file name -> its File, once fetched
const sampleScenes = new Map(); // sample file name -> its scene graph, once fetched

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
