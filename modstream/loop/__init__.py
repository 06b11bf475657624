"""The weekly learning loop: dataset (verdicts joined with labels and texts), rescore, retrain,
gate, report, replay, and promotion (serving a bundle hot, its text model loaded into Triton first)."""
