"""One package per decision problem: instance → model → solve → plan, plus a solver-free checker.

``common`` holds what the problems share: solve options, the solver-neutral status and one
mapping table per solver, and the solve record every plan carries.
"""
