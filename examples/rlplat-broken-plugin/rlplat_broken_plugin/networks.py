"""Imports fine, but does not define the ``NoSuchTorso`` its entry point names."""
