"""The policy side of each model family, one folder per family with the same files, named after it:
`<family>_io.py` (observation and prompt to the model's prefix, language prompts, the built-in models and the
family's `PolicyFamily` record), `<family>_resolve.py`, `_load.py`, `_norm.py`, `_weights.py`, `_report.py` (its
checkpoint folders: conventions, loading, normalisation statistics, weight headers, the `inspect` text). The modeling
is oxygen_gym/model/<family>/; the families are listed in policies/checkpoints/family_names.py."""
