"""Measures computed from a model bundle and its training statistics."""
