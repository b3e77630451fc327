"""Where the public cluster traces live (openb, Lingjun, Philly: ../shared/traces/README.md).

One answer for every user of the traces (the simulator, ``sluice simulate``, the dev cluster's
Lingjun profile), at the bottom of the layers so that each of them may ask.
"""

from __future__ import annotations

import os
from pathlib import Path


def traces_dir() -> Path:
    """SLUICE_TRACES_DIR, else ``shared/traces`` beside the checkout (as CI lays it out)."""
    configured = os.environ.get("SLUICE_TRACES_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "shared" / "traces"
