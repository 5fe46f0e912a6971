"""The placement benchmarks (``python -m benchmarks.placement.bench`` and its siblings) and the
generated instances they run on (:mod:`benchmarks.placement.generate`), apart from the
formulations in :mod:`formulation.placement`."""
