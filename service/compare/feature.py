"""``install(app, runtime)``: the comparison as a feature of the gateway — the ``CompareService``,
``/v1/compare`` and its tag, and with ``COMPCAP_SHADOW_MODEL`` set the shadow comparison: a listener
after caption responses, closed when the app stops. ``COMPCAP_SHADOW_MODEL`` is parsed here, at
start-up, against the repository's captioners: a bad one stops the start as any invalid setting does."""

from __future__ import annotations

from fastapi import FastAPI

from service.api.deps import Runtime
from service.api.feature import add_tag, closing
from service.compare.configs import Configuration, parse_configuration
from service.compare.router import router
from service.compare.service import CompareService
from service.compare.settings import CompareSettings
from service.compare.shadow import ShadowComparer
from service.compare.stored import StoredReservoir
from service.manifest import Manifest
from service.sections import check_setting, invalid_setting

TAG = {
    "name": "comparison",
    "description": "Maximum-discrepancy comparison (Wan et al., 2022): two or more configurations on the "
    "same images, most discrepant first by NGSM; the live shadow comparison's reservoir.",
}


def shadow_configuration(settings: CompareSettings, manifest: Manifest) -> Configuration | None:
    """``COMPCAP_SHADOW_MODEL`` parsed (None: unset); a ``ValidationError`` names the part at fault
    or the unknown captioner."""
    if settings.shadow_model is None:
        return None
    configuration = check_setting("shadow_model", settings.shadow_model, parse_configuration)
    names = [c.name for c in manifest.captioners]
    if configuration.model not in names:
        unknown = f"shadow_model: unknown captioner {configuration.model!r}; captioners: {', '.join(names)}"
        raise invalid_setting((), ValueError(unknown), settings.shadow_model)
    return configuration


def install(app: FastAPI, runtime: Runtime) -> None:
    """Serve ``POST /v1/compare`` and ``GET /v1/compare/shadow``; feed the shadow, when one is set."""
    settings = CompareSettings.of(runtime.settings)  # its own section
    configuration = shadow_configuration(settings, runtime.manifest)
    app.state.compare = CompareService(settings.max_comparisons)
    app.state.shadow = None
    if configuration is not None:
        shadow = ShadowComparer(
            configuration,
            settings.shadow_rate,
            runtime.metrics.registry,
            capacity=settings.shadow_reservoir_size,
            max_bytes=settings.shadow_reservoir_bytes,
            keep_images=settings.shadow_keep_images,
            max_pending=settings.shadow_max_pending,
            reservoir=StoredReservoir(
                runtime.state,
                configuration.name,
                settings.shadow_reservoir_size,
                settings.shadow_reservoir_bytes,
            ),
        )
        app.state.shadow = shadow
        runtime.after_caption.append(shadow.offer_output)
        runtime.lifespans.append(closing(shadow.close))
    app.include_router(router)
    add_tag(app, TAG)
