"""The base of specreg's shared models: a pydantic model whose schema is built on first use.

Building a model's validator and serializer costs milliseconds each, and the first one in a
process pulls in most of pydantic's schema machinery (~50 ms). `inspect` and `check pair`
construct summaries from values the reader has already type-checked and print them; with
`defer_build` they never pay for a schema they do not use. Validation and JSON output build
it on first call, exactly as before.
"""

from __future__ import annotations

import pydantic
from pydantic import ConfigDict


class BaseModel(pydantic.BaseModel):
    model_config = ConfigDict(defer_build=True)
