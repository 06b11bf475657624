"""Labelled corpora that install from registries, and the default training set built from them."""
