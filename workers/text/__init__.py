"""Text handling in the worker: normalisation, links, languages, the text model's encoder and its n-gram companion."""
