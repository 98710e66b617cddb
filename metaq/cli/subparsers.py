"""The one name for argparse's sub-command collection that every ``metaq`` sub-command registers into.

typeshed makes ``argparse._SubParsersAction`` generic in the parser class, but argparse does not let it be
subscripted at run time: the alias is a string, read only by the type checker.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What ``ArgumentParser.add_subparsers()`` returns; a sub-command's ``register(sub)`` adds its parser to it."""

__all__ = ["SubParsers"]
