"""Keep a Python worker's long-lived objects out of the cyclic GC's full collections.

A reused PySpark worker runs ``gc.collect()`` after every task (``pyspark.daemon``), and that
full collection walks every tracked object: with numpy, pyarrow, pyspark, this package and
numba's kernels imported, ~170 000 objects and ~80 ms per task on a 2-core VM - between the
end of one task and the start of the next. ``gc.freeze`` moves the objects alive at that
point to a permanent generation that collections skip (objects are still freed by their
reference counts; only cycles among frozen objects are never collected).
"""

from __future__ import annotations

import gc
import sys

_modules_at_freeze = -1


def freeze_imported() -> bool:
    """``gc.freeze()`` when modules were imported since the last freeze; True when it froze.

    Called where few short-lived objects are alive: in the daemon after its imports, and on
    entry to a task's mapper, which in a reused worker follows the daemon's full collection.
    Freezing only after new imports bounds what a task could leave frozen to the few objects
    of the tasks that first imported something (modules are imported once per process).
    """
    global _modules_at_freeze
    if len(sys.modules) == _modules_at_freeze:
        return False
    gc.freeze()
    _modules_at_freeze = len(sys.modules)
    return True
