"""Adapters from the daemon's seams (:mod:`planner.daemon.ports`) to the planners and executors.

``solo``: plain disaggregation (each job alone on its cheapest pools), the baseline placer.
"""
