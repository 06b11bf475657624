"""Offline training toolchain: corpus, labelled-data loaders, the content model and plots.

Needs the ``train`` extra (torch, transformers, ...); the worker never imports it.
"""
