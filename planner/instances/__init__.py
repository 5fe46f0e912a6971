"""Compile a scenario into plain numbers: estimator inputs (``common``) and one instance builder
per decision problem (``placement``, ``realloc``, ``capacity``). Formulations never see a
scenario or an estimator; they receive what these modules produce."""
