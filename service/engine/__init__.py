"""The engine: beam search batched across requests, the model runner, the model contract.

Public API: ``CaptionEngine`` (``service.engine.engine``), ``SearchParams`` and the ``EngineError``
family (``service.engine.params``), ``Priority`` (``service.engine.request``), ``StepEvent`` /
``StepObserver`` (``service.engine.observer``), ``ModelRunner`` (``service.engine.runner``), the hook
registry (``service.engine.hooks``) and its logits processors (``service.engine.processors``). It knows
nothing of research: probes, explanations and comparison are its clients.
"""
