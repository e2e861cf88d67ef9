"""Hostile-input regression corpus (see corpus.py)."""
