"""vramfit: predict, plan and diagnose PyTorch GPU memory.

The `vramfit` command is a compiled binary installed next to this package; `python -m vramfit`
runs it. This package also holds the probe (`vramfit.probe`), which records what a real training
run allocates, for `vramfit measure` to put beside its own sampling and the estimate.
"""

import os
import sys
import sysconfig

from vramfit._probe import HFCallback, LightningCallback, Probe, probe

__all__ = ["HFCallback", "LightningCallback", "Probe", "find_vramfit_bin", "probe"]


def find_vramfit_bin() -> str:
    """The path of the `vramfit` binary installed with this package."""
    name = "vramfit.exe" if sys.platform == "win32" else "vramfit"
    candidates = [sysconfig.get_path("scripts")]
    if sys.version_info >= (3, 10):
        user_scheme = sysconfig.get_preferred_scheme("user")
        candidates.append(sysconfig.get_path("scripts", scheme=user_scheme))
    # A `pip install --target DIR` puts the binary in DIR/bin beside the package.
    candidates.append(os.path.join(os.path.dirname(os.path.dirname(__file__)), "bin"))
    for folder in candidates:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise FileNotFoundError(
        "the vramfit binary was not found beside the vramfit package (looked in "
        + ", ".join(candidates)
        + "); reinstall with `pip install --force-reinstall vramfit`"
    )
