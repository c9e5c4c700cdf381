"""Images from outside: ``decode`` turns untrusted bytes (an upload, a fetched URL's body, a probe set's
file) into the model's input, refusing what it must; ``url_policy`` holds the pure checks of which image
URLs may be fetched (the fetcher itself is the HTTP kit's, ``service.api.image_url``). Imports nothing of
the service but ``service.checks``."""
