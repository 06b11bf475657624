"""The weekly learning loop: dataset (verdicts joined with labels and texts), rescore, retrain,
gate, report, replay."""
