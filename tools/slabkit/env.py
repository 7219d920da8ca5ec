"""env.py — where the tools find the source tree and the build, and the
environment the programs they measure start with.

The build directory is SLABKIT_BUILD when it is set (a relative path names a
directory of the source tree, as make's BUILD does); otherwise the build whose
environment runs this Python (make creates it as <build>/venv and marks it
with the file slabkit-build); otherwise <source>/build.
"""
import os
import sys

# tools/slabkit/env.py -> the repository; None when the package was installed
# away from its source tree.
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE_ROOT = _ROOT if os.path.isdir(os.path.join(_ROOT, "src")) else None
VENV_MARK = "slabkit-build"


def build_dir():
    b = os.environ.get("SLABKIT_BUILD")
    if b:
        return os.path.abspath(os.path.join(SOURCE_ROOT or os.getcwd(), b))
    if os.path.isfile(os.path.join(sys.prefix, VENV_MARK)):
        return os.path.dirname(os.path.abspath(sys.prefix))
    return os.path.join(SOURCE_ROOT or os.getcwd(), "build")


def clean_env(base=None):
    """The environment for a measured program: ours without any allocator,
    probe or slabkit setting (no LD_PRELOAD, SLABKIT_*, IMAS_*), so it runs on
    the system allocator unless the caller says otherwise."""
    env = dict(os.environ if base is None else base)
    for k in list(env):
        if k == "LD_PRELOAD" or k.startswith(("SLABKIT_", "IMAS_")):
            del env[k]
    return env
