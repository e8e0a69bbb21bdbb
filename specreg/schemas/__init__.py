"""Pydantic models and enums shared across specreg (no I/O, imports nothing of ours but errors).

Import from the submodules (`specreg.schemas.checks`, ...). This package itself imports
nothing, so that a light module such as `schemas.methods` loads without building any
pydantic model (the CLI needs the methods at start-up, the models only when a command runs).
"""
