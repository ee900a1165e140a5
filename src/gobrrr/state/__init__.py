"""The state a workload reaches, and how gobrrr leaves it as it found it.

reach.py  finding it: the walker over closures, `self`, arguments, containers, attributes
          and the module globals a function's code names
copy.py   independent copies for optimize; snapshots restored in place
guard.py  preserved_state: the user's tensors, objects, RNG and flags put back, verified
"""

from gobrrr.state.copy import (
    Copied,
    clone_tree,
    copy_workload,
    describe,
    plain_state,
    put_back,
    restore,
    snapshot,
    stateful_ids,
)
from gobrrr.state.guard import StateCheck, preserved_globals, preserved_state
from gobrrr.state.reach import (
    MAX_STATE_DEPTH,
    Reach,
    collect_state,
    global_names,
    is_state,
    reachable_state,
    walk,
)

__all__ = ["Copied", "copy_workload", "describe", "stateful_ids", "snapshot", "restore",
           "clone_tree", "preserved_state", "preserved_globals", "StateCheck", "Reach",
           "walk", "reachable_state", "collect_state", "is_state", "global_names",
           "plain_state", "put_back", "MAX_STATE_DEPTH"]
