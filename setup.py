"""The optional compiled data path: C extensions beside their Python twins.

Everything else about the package is in pyproject.toml. Each extension is `optional=True`, as
aioquic, multidict and msgpack ship theirs: `pip install` without a compiler still succeeds and
the Python data path runs (contracts.datapath says which one a process got, and why). An
extension is listed only while its source exists, so a checkout mid-change still installs.
"""

from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).parent
FLAGS = [
    "-O2",
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-fno-strict-aliasing",
    "-ffp-contract=off",
]  # no fused multiply-add: the C and Python twins round alike
EXTENSIONS = {
    "switch._core": ["switch/_core.c"],  # the switch's forwarding core (switch/core.py)
    "endpoint._burst": ["endpoint/_burst.c"],  # the endpoint's burst I/O and codec
}
LIBRARIES = {"endpoint._burst": ["z"]}  # zlib's crc32, the one Python's zlib module uses

setup(
    ext_modules=[
        Extension(
            name,
            sources,
            optional=True,
            extra_compile_args=FLAGS,
            libraries=LIBRARIES.get(name, []),
        )
        for name, sources in EXTENSIONS.items()
        if all((HERE / s).exists() for s in sources)
    ]
)
