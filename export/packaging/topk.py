"""A captioner's step graph that also returns each row's best words (``service.engine.sparse``), so
that a step on a GPU hands beam search k + 1 numbers per row instead of the whole vocabulary.

``add_top_k`` adds to a ``<cap>_step`` graph one input and three outputs, computed from its
``logprobs`` output inside the graph (on the device that runs it):

| tensor | dtype, dims | |
|---|---|---|
| ``top_k`` (input) | INT64 [1] | k, the words per row wanted |
| ``top_logprobs`` | FP32 [N, k] | each row's k largest log-probs (``TopK``) |
| ``top_tokens`` | INT64 [N, k] | their word ids |
| ``eos_logprob`` | FP32 [N] | each row's end-token log-prob |

The other outputs stay; a caller asks a backend for the outputs it wants (whole rows when a request
reads them, ``top_*`` otherwise), and onnxruntime copies off the device only those. Old repositories
(steps without these tensors) are served as before: the engine takes the top k on the host."""

from __future__ import annotations

from pathlib import Path

from service.checks import at_least

TOP_K_INPUT = "top_k"
TOP_OUTPUTS = ("top_logprobs", "top_tokens", "eos_logprob")


def add_top_k(model: object, eos: int) -> object:
    """``model`` (an ``onnx.ModelProto`` of a step with a ``logprobs`` output [N, V]) with the ``top_k``
    input and the ``top_logprobs``, ``top_tokens``, ``eos_logprob`` outputs (module docstring). Pure:
    returns a new model. ``ValueError`` when it has no ``logprobs`` output or already has them."""
    import onnx
    from onnx import TensorProto, helper

    assert isinstance(model, onnx.ModelProto)
    graph = model.graph
    outputs = {o.name for o in graph.output}
    if "logprobs" not in outputs:
        raise ValueError("the step graph has no logprobs output")
    if outputs & set(TOP_OUTPUTS) or TOP_K_INPUT in {i.name for i in graph.input}:
        raise ValueError("the step graph already returns its top k")
    at_least(0, eos=eos)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    g.input.append(helper.make_tensor_value_info(TOP_K_INPUT, TensorProto.INT64, [1]))
    g.initializer.append(helper.make_tensor("compcap_eos_id", TensorProto.INT64, [], [eos]))
    g.node.extend(
        [
            helper.make_node(
                "TopK",
                ["logprobs", TOP_K_INPUT],
                ["top_logprobs", "top_tokens"],
                axis=-1,
                largest=1,
                sorted=1,
                name="compcap_top_k",
            ),
            helper.make_node(
                "Gather", ["logprobs", "compcap_eos_id"], ["eos_logprob"], axis=1, name="compcap_eos_logprob"
            ),
        ]
    )
    g.output.extend(
        [
            helper.make_tensor_value_info("top_logprobs", TensorProto.FLOAT, ["rows", "k"]),
            helper.make_tensor_value_info("top_tokens", TensorProto.INT64, ["rows", "k"]),
            helper.make_tensor_value_info("eos_logprob", TensorProto.FLOAT, ["rows"]),
        ]
    )
    onnx.checker.check_model(out)
    return out


def add_top_k_file(path: Path, eos: int) -> None:
    """``add_top_k`` on the ONNX file at ``path``, in place."""
    import onnx

    model = onnx.load(str(path))
    onnx.save(add_top_k(model, eos), str(path))  # type: ignore[arg-type]


__all__ = ["TOP_K_INPUT", "TOP_OUTPUTS", "add_top_k", "add_top_k_file"]
