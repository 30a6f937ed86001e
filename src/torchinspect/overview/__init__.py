"""`inspect report`: the results of several commands for one or more models, collected once.

:func:`collect_overview` resolves each model, traces it once and builds the ``summary`` and
``flops`` views from that trace; the module graph, the ``doctor`` findings and (on request)
the ``bench`` timings come from their own command cores through :mod:`.parts`, each optional:
a part that is not installed or fails becomes a one-line reason, never an error.
"""

from torchinspect.overview.collect import ModelOverview, Overview, collect_overview

__all__ = ["ModelOverview", "Overview", "collect_overview"]
