"""The text model: fine-tune, export to ONNX, score and calibrate, with its n-gram companion and their fusion."""
