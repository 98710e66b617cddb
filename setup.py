"""The one compiled part of metaq: the v0/v1 message set loop (metaq/protocol/_legacy_decode.c, see
metaq/protocol/legacy.py). Everything else is in setup.cfg.

The extension is required: without a C compiler or the interpreter's headers (Python.h) the install fails
with the message below rather than leaving a metaq that reads Kafka 0.8-0.10 data at a third of the speed.
"""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_HINT = ("metaq builds a C extension (metaq/protocol/_legacy_decode.c): it needs a C compiler and the headers "
         "of this Python (Python.h). On Debian/Ubuntu: apt-get install gcc python3-dev (python3.X-dev for "
         "another python3.X; `make install` as root installs them). The build said: ")


class _RequiredBuildExt(build_ext):
    """build_ext that says what is missing when the compiler or Python.h is."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as e:  # distutils' CompileError/PlatformError/LinkError: rewrap them all
            raise SystemExit(_HINT + f"{type(e).__name__}: {e}") from e

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as e:
            raise SystemExit(_HINT + f"{type(e).__name__}: {e}") from e


setup(
    ext_modules=[Extension("metaq.protocol._legacy_decode", ["metaq/protocol/_legacy_decode.c"],
                           extra_compile_args=["-O2"])],
    cmdclass={"build_ext": _RequiredBuildExt},
)
