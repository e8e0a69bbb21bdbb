"""The base of specreg's shared models: a pydantic model whose schema is built on first use.

Building a model's validator and serializer costs milliseconds each, and the first one in a
process pulls in most of pydantic's schema machinery; with `defer_build` a command
never pays for a schema it does not use. Validation and JSON output build it on first call.
(`check pair` defines no model at all: its records are dataclasses, schemas/record.py.)
"""

from __future__ import annotations

import pydantic
from pydantic import ConfigDict


class BaseModel(pydantic.BaseModel):
    model_config = ConfigDict(defer_build=True)
