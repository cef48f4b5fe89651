"""A user's Python check, run like model-written code: only in the sandbox, and its verdict decided
outside the check's own process.

The check is the *program* of the code suites' harness (``code/_runner.py``, script mode): it is
loaded in the sandbox's child process, which holds neither the harness's stdout nor its nonce. The
harness's own process calls it through the plain-data proxy with the reply and the item, and passes
the item only when the call returns ``True`` (the bool). So the check sees the reply and the item,
never the host (no network, a private filesystem, CPU / memory / time limits: quantladder.sandbox),
and cannot print or otherwise forge a pass: a check that raises, returns anything but ``True``, is
killed at a limit or touches a wall fails, with the sandbox's failure kind.
"""

from __future__ import annotations

import json

from ..code.score import Program, ScoreSettings, run_program

ENTRY = "_quantladder_user_check"
# The harness's trusted side: runs in its own process, never in the check's.
_JUDGE = """
import json as _json
_REPLY = _json.loads({reply!r})
_ITEM = _json.loads({item!r})


def check(candidate):
    got = candidate(_REPLY, _ITEM)
    if got is not True:
        raise AssertionError("the check returned %r, not True" % (got,))
"""


def run_check(source: str, function: str, reply: str, item: dict, settings: ScoreSettings) -> tuple[bool, str, str]:
    """(passed, failure kind or "", detail) of one Python check on one reply, in the sandbox."""
    judge = _JUDGE.format(reply=json.dumps(reply), item=json.dumps(item, default=str))
    # The harness names its judge `check` and binds the entry point beside it: the user's function
    # (often also called `check`) is served under a name of its own.
    program = f"{source}\n\n{ENTRY} = {function}\n"
    r = run_program(Program("script", program, judge, ENTRY), settings)
    return bool(r["passed"]), r["error_type"] or "", (r.get("detail") or "")[:300]
