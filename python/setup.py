"""Builds the C library with the repository's top-level CMake and bundles libnormjit.so.0 in the package.

The package itself is pure Python (ctypes over include/normjit.h); only the library is compiled.
NORMJIT_CMAKE_BUILD_DIR reuses a configured build folder (CI: the one its tests already built);
NORMJIT_NO_BUNDLE=1 skips the library (it is then found through NORMJIT_LIBRARY or the system).
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if os.environ.get("NORMJIT_NO_BUNDLE") == "1":
            return
        if not (REPO / "CMakeLists.txt").exists() or not (REPO / "include" / "normjit.h").exists():
            raise SystemExit("normjit: build from the repository (pip install ./python), or set NORMJIT_NO_BUNDLE=1")
        build = Path(os.environ.get("NORMJIT_CMAKE_BUILD_DIR") or REPO / "build-python")
        if not (build / "CMakeCache.txt").exists():
            gen = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", str(REPO), "-B", str(build), *gen,
                                   "-DCMAKE_BUILD_TYPE=RelWithDebInfo"])
        subprocess.check_call(["cmake", "--build", str(build), "--target", "normjit", "-j", str(os.cpu_count() or 2)])
        dest = Path(self.build_lib) / "normjit"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build / "libnormjit.so.0", dest / "libnormjit.so.0")


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
