"""Numbers for the formulations: GPU catalogue, model memory, phase durations, throughput curves,
migration and weight-sync costs, online fitting.

Every constant names its source. Run-time calibration ships in ``estimators/data/`` (with the
upstream licenses); ``python -m estimators.calibrate`` regenerates it from ``../shared/data``.
"""
