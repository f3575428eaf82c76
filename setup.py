"""Build hooks: the packages, with the checkout's top-level tuner/ and tuning_tables/ shipped as
mcr.tuner and mcr.tuning_tables; mcr_autoload.pth at the top of site-packages (MCR_DEEPSPEED=1
and MCR_FSDP=1 need it). Everything else is in pyproject.toml."""

import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PTH = os.path.join("mcr", "integrations", "mcr_autoload.pth")


class BuildPyWithPth(build_py):
    """build_py that also places mcr_autoload.pth beside the packages."""

    def run(self) -> None:
        """Build the packages, then copy the .pth file to the top of the build."""
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, os.path.basename(PTH)))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        """The packages' files and the .pth file (editable installs read this list)."""
        return [*super().get_outputs(include_bytecode),
                os.path.join(self.build_lib, os.path.basename(PTH))]


MAPPED = {"mcr.tuner": "tuner", "mcr.tuning_tables": "tuning_tables"}

setup(
    packages=find_packages(include=["mcr", "mcr.*"]) + list(MAPPED),
    package_dir=MAPPED,
    package_data={"mcr.tuning_tables": ["*.yaml", "*.csv"], "mcr.backends.symm": ["*.cu"]},
    cmdclass={"build_py": BuildPyWithPth},
)
