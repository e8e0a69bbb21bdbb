"""Renderers: how each command's results look on a terminal (rich), kept apart from the commands."""
