"""The HTTP kit every router uses — the ``Runtime`` and route dependencies, auth, errors and their
handlers, request limits and parsing (the two body forms of every image route: ``bodies``), pacing,
schemas, uploads, the request log — and the contract a feature package installs itself by
(``feature``). It imports no feature; ``service.gateway`` above it mounts them."""
