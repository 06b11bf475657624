"""The pipeline stages, in order: validate, short_circuit, enrich, score, decide, publish.

Each stage's module-level ``STAGE`` is both its name in logs and its metric label.
"""
