"""The composition root: ``create_app`` (``app``) mounts the HTTP kit (``service.api``), the caption
routes (``routes``, ``shape``, ``openapi``) and the features the settings name (``features``);
``server`` runs it under uvicorn. Nothing below imports this package."""
