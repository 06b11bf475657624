"""Experiments, each run as ``python -m training.experiments.<name>``: measurements behind the docs.

The product never imports them.
"""
