"""A captioner's step graph that gathers its rows' decoder states itself (model contract v3), so that
the state can stay on the model's device between step calls (``service.engine.state_rows``).

``add_state_gather`` turns a step's ``state`` input [N, S] into three, and gathers the rows' states
from them inside the graph before anything else reads ``state``:

| input | dtype, dims | |
|---|---|---|
| ``state`` | FP32 [P, S] | the previous step call's ``state_out`` rows, as they came out (P may be 0) |
| ``state_new`` | FP32 [J, S] | initial states of images new to this call (J may be 0) |
| ``state_index`` | INT64 [N] | row n's state is row ``state_index[n]`` of ``concat(state, state_new)`` |

Outputs are unchanged (``state_out`` is still [N, S], row for row). A beam search then hands each call
the previous ``state_out`` as it was, wherever the backend kept it, and the reorder of beams is one
``Gather`` on the device. The gather is exact: a v3 step computes bit for bit what the v2 step computes
on the gathered rows. Old repositories (steps without ``state_index``) are served as before: the engine
gathers on the host. ``upgrade_repository`` rewrites a repository's steps (and their precision
variants) in place (``compcap upgrade``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from service.manifest import MANIFEST_NAME, TensorSpec, load_manifest

STATE_INPUTS = ("state", "state_new", "state_index")
_GATHERED = "compcap_state_rows"


def gathers_state(model: object) -> bool:
    """Whether the ``onnx.ModelProto`` ``model`` already takes ``state_index``."""
    return "state_index" in {i.name for i in model.graph.input}  # type: ignore[attr-defined]


def _rename_inputs(graph: object, old: str, new: str) -> None:
    """Every node input called ``old`` in ``graph`` and its subgraphs (outer-scope reads) → ``new``."""
    from onnx import AttributeProto

    for node in graph.node:  # type: ignore[attr-defined]
        for k, name in enumerate(node.input):
            if name == old:
                node.input[k] = new
        for attr in node.attribute:
            if attr.type == AttributeProto.GRAPH:
                _rename_inputs(attr.g, old, new)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _rename_inputs(sub, old, new)


def add_state_gather(model: object) -> object:
    """``model`` (an ``onnx.ModelProto`` of a step with a ``state`` input [N, S]) with the v3 inputs
    (module docstring). Pure: returns a new model. ``ValueError`` when it has no ``state`` input, or
    already gathers."""
    import onnx
    from onnx import TensorProto, helper

    assert isinstance(model, onnx.ModelProto)
    if gathers_state(model):
        raise ValueError("the step graph already gathers its states (it has a state_index input)")
    inputs = {i.name: i for i in model.graph.input}
    if "state" not in inputs:
        raise ValueError("the step graph has no state input")
    if {o.name for o in model.graph.output} & {"state", _GATHERED}:
        raise ValueError("the step graph returns its state input unchanged under that name")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    _rename_inputs(g, "state", _GATHERED)
    dims = inputs["state"].type.tensor_type.shape.dim
    width: str | int = dims[1].dim_value if len(dims) > 1 and dims[1].HasField("dim_value") else "state_width"
    state = next(i for i in g.input if i.name == "state")
    state.CopyFrom(helper.make_tensor_value_info("state", TensorProto.FLOAT, ["pooled", width]))
    g.input.extend(
        [
            helper.make_tensor_value_info("state_new", TensorProto.FLOAT, ["new", width]),
            helper.make_tensor_value_info("state_index", TensorProto.INT64, ["rows"]),
        ]
    )
    gather = [
        helper.make_node(
            "Concat", ["state", "state_new"], ["compcap_state_pool"], axis=0, name="compcap_pool"
        ),
        helper.make_node(
            "Gather", ["compcap_state_pool", "state_index"], [_GATHERED], axis=0, name="compcap_state_gather"
        ),
    ]
    nodes = list(g.node)
    del g.node[:]
    g.node.extend([*gather, *nodes])
    onnx.checker.check_model(out)
    return out


def add_state_gather_file(path: Path) -> None:
    """``add_state_gather`` on the ONNX file at ``path``, in place (unless it already gathers)."""
    import onnx

    model = onnx.load(str(path))
    if not gathers_state(model):
        onnx.save(add_state_gather(model), str(path))  # type: ignore[arg-type]


def v3_inputs(inputs: Sequence[TensorSpec]) -> list[TensorSpec]:
    """A step's manifest inputs with ``state_new`` and ``state_index`` after ``state`` (unchanged when
    they are there)."""
    names = [i.name for i in inputs]
    if "state_index" in names:
        return list(inputs)
    if "state" not in names:
        raise ValueError("the step has no state input")
    out: list[TensorSpec] = []
    for spec in inputs:
        out.append(spec)
        if spec.name == "state":
            out.append(TensorSpec(name="state_new", dtype="FP32", dims=list(spec.dims)))
            out.append(TensorSpec(name="state_index", dtype="INT64", dims=[-1]))
    return out


def upgrade_repository(repo: Path) -> list[str]:
    """Rewrite every captioner step of the repository at ``repo`` that does not gather its states (and
    each of its precision variants listed) to contract v3: the ONNX file, its ``config.pbtxt`` and its
    inputs in ``manifest.json`` (edited in place: nothing else in it changes). The names of the models
    rewritten."""
    from export.packaging.triton_repo import config_pbtxt
    from service.backends.triton.addresses import file_sha256

    repo = Path(repo)
    manifest = load_manifest(repo)
    steps = {c.step for c in manifest.captioners}
    variant_of = {
        variant: original
        for precision in manifest.precision_variants.values()
        for original, variant in precision.models.items()
    }
    raw = json.loads((repo / MANIFEST_NAME).read_text(encoding="utf-8"))
    changed: list[str] = []
    for entry, stored in zip(manifest.models, raw["models"], strict=True):
        if variant_of.get(entry.name, entry.name) not in steps or "state_index" in {
            i.name for i in entry.inputs
        }:
            continue
        add_state_gather_file(entry.path(repo))
        entry = entry.model_copy(update={"inputs": v3_inputs(entry.inputs)})
        stored["inputs"] = [spec.model_dump() for spec in entry.inputs]
        text = config_pbtxt(entry, digest=file_sha256(entry.path(repo)))
        (repo / entry.name / "config.pbtxt").write_text(text, encoding="utf-8")
        changed.append(entry.name)
    if changed:
        (repo / MANIFEST_NAME).write_text(json.dumps(raw, indent=2), encoding="utf-8")
        load_manifest(repo)  # still valid
    return changed


__all__ = [
    "STATE_INPUTS",
    "add_state_gather",
    "add_state_gather_file",
    "gathers_state",
    "upgrade_repository",
    "v3_inputs",
]
