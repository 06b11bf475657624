"""Serving artefacts: trained models cached by content hash, Triton's model repository, the TensorRT engine."""
