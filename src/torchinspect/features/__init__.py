"""``inspect features``: any layer's output for images, folders or tensor files.

:func:`extract_features` runs the model and writes sharded safetensors (or npy/pt) plus a
``manifest.json``; :class:`FeatureFolder` reads them back; :func:`list_layers` lists the
extractable module and FX node names.
"""

from torchinspect.features.extract import FeatureResult, extract_features
from torchinspect.features.layers import LayerCapture, LayerInfo, LayerListing, list_layers
from torchinspect.features.runner import Progress
from torchinspect.features.store import FeatureFolder

__all__ = ["FeatureFolder", "FeatureResult", "LayerCapture", "LayerInfo", "LayerListing",
           "Progress", "extract_features", "list_layers"]
