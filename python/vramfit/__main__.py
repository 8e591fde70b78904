"""`python -m vramfit ...` runs the `vramfit` binary installed with this package."""

import os
import sys

from vramfit import find_vramfit_bin


def _run() -> None:
    vramfit = find_vramfit_bin()
    if sys.platform == "win32":
        import subprocess

        completed = subprocess.run([vramfit, *sys.argv[1:]])
        sys.exit(completed.returncode)
    os.execvp(vramfit, [vramfit, *sys.argv[1:]])


if __name__ == "__main__":
    _run()
