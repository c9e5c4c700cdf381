"""CompCap offline pipeline: SceneWorld, training, ONNX export and the Triton model repository."""
