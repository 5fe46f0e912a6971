"""On-ramp: scenarios written from RL frameworks' own job configs (``planner init --from``).

:mod:`planner.onramp.verl` reads a verl (Hydra YAML) job config, :mod:`planner.onramp.slime` a
slime one (its argparse arguments, as a shell-style argument file or a YAML mapping); both fill a
:class:`planner.onramp.shape.JobShape`, which :mod:`planner.onramp.shape` writes as a commented
scenario (each value says which field of the source config it came from).
"""
