"""Ship csrc/ and configs/ inside the wheel.

The tool reads the CUDA sources (JIT build) and the TOML presets at run time.
In a source checkout or an editable install it finds them at the repository
root; a regular wheel gets a copy under ``mqa_topk_cli/_data`` (see
``mqa_topk_cli/resources.py``).
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

_SHIPPED = ("csrc", "configs")


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # editable installs read the checkout directly
        here = os.path.dirname(os.path.abspath(__file__))
        for name in _SHIPPED:
            src = os.path.join(here, name)
            dst = os.path.join(self.build_lib, "mqa_topk_cli", "_data", name)
            if os.path.isdir(src):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.o", "build"))


setup(cmdclass={"build_py": BuildPyWithData})
