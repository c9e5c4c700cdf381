"""SceneWorld: a procedurally rendered world of small images with exact scene graphs, whose concepts mirror
COCO's — ``scene`` (a scene graph per image), ``render`` (its pixels), ``captions`` (five reference
captions and the concept pairs present), ``labels`` (per-cell labels of the objects) and ``dataset``
(worlds in memory or as COCO-format caption folders). The product draws probe sets and benchmark images
from it; the lab trains and evaluates the model zoo on it. Imports nothing of the product but
``service.checks`` and ``service.text``."""
