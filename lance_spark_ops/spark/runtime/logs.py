"""The handler this library's progress lines are written with when nobody configured logging."""

from __future__ import annotations

import logging
import sys
from typing import Any


class CurrentStderr(logging.StreamHandler):
    """A ``StreamHandler`` writing to ``sys.stderr`` as it is when a record is emitted, not as it
    was when the handler was made: a harness that swaps ``sys.stderr`` for a while (pytest's
    capture, a notebook cell's) would otherwise leave the handler writing to a closed stream."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ sets it; always sys.stderr
        pass
