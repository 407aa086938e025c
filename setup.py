"""Builds mlircap: CMake (the C++ core, mlircap-opt, the binding) + the Python package.

    pip install --no-build-isolation -e .     # developer install (incremental: build/ is kept)
    pip install --no-build-isolation .

The LLVM/MLIR SDK comes from the PyPI packages xtc-llvm-dev and xtc-mlir-dev
installed in the same environment (hence --no-build-isolation).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Command, find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUILD = Path(os.environ.get("MLIRCAP_BUILD_DIR", ROOT / "build"))
PKG_LIB = ROOT / "python" / "mlircap" / "_lib"


def sdk_dir(name: str) -> Path:
    """<site-packages>/<name> of the xtc SDK wheels (namespace packages)."""
    for entry in sys.path:
        cand = Path(entry) / name / "lib" / "cmake" / name
        if cand.is_dir():
            return cand
    raise SystemExit(f"mlircap: cannot find the {name} SDK; pip install xtc-{name}-dev xtc-{name}-tools")


def build_native():
    BUILD.mkdir(parents=True, exist_ok=True)
    if not (BUILD / "build.ninja").exists():
        subprocess.check_call([
            "cmake", "-G", "Ninja", "-S", str(ROOT), "-B", str(BUILD),
            f"-DMLIR_DIR={sdk_dir('mlir')}", f"-DLLVM_DIR={sdk_dir('llvm')}",
            f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release",
        ])
    jobs = os.environ.get("MLIRCAP_JOBS", str(os.cpu_count() or 2))
    subprocess.check_call(["cmake", "--build", str(BUILD), "-j", jobs])
    PKG_LIB.mkdir(parents=True, exist_ok=True)
    for f in list((BUILD / "lib").glob("libmlircap_core.so")) + list((BUILD / "lib").glob("_mlircap*.so")) + \
            [BUILD / "bin" / "mlircap-opt"]:
        shutil.copy2(f, PKG_LIB / f.name)


class BuildNative(Command):
    description = "build the C++ core with CMake"
    user_options = []

    def initialize_options(self):
        pass

    def finalize_options(self):
        pass

    def run(self):
        build_native()


class BuildPy(build_py):
    def run(self):
        build_native()
        super().run()


setup(
    name="mlircap",
    version="0.1.0",
    description="An MLIR-based compiler for PyTorch programs",
    package_dir={"": "python"},
    packages=find_packages("python"),
    package_data={"mlircap": ["_lib/*"]},
    python_requires=">=3.11",
    cmdclass={"build_py": BuildPy, "build_native": BuildNative},
    entry_points={
        "console_scripts": ["mlircap-opt = mlircap.tools.opt:main"],
        "torch_dynamo_backends": ["mlircap = mlircap:mlircap_backend"],
    },
)
