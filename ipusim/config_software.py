"""The software section of a machine config: the simulated software stack.

A run simulates a machine and the libraries its program was built with. Poplibs'
planners changed between releases (docs/planner.md, "Poplibs releases"), so the release
whose planning ipusim follows is a setting of the run, like the machine's numbers: the
calibration rows measured with an older Poplibs are planned as that release planned
them (``examples/calibration/points.py``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ipusim.config_base import Section

__all__ = ["POPLIBS_RELEASES", "SoftwareConfig"]

#: The graphcore/poplibs commits whose planning ipusim can follow, newest first.
POPLIBS_RELEASES = ("7eac0f26", "f927358")

PoplibsRelease = Literal["7eac0f26", "f927358"]


class SoftwareConfig(Section):
    """The simulated software stack (left out of dumps and hashes at its defaults)."""

    poplibs_release: PoplibsRelease = Field(
        default="7eac0f26",
        description="The graphcore/poplibs commit whose matMul and convolution planning "
        "poplin follows: '7eac0f26' (the newest public source: serial splits with a padded "
        "last iteration, inputs broadcast before an output-channel loop) or 'f927358' "
        "(2021-03-10, the SDK 2.0/2.1-era Poplibs of source J's measurements: serial splits "
        "that divide the channels, no broadcast before the loop).",
    )
