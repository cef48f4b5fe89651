"""Runs INSIDE the sandbox (standard library only): replay function calls against BFCL's backend classes.

Input ``job.json`` in the cwd: involved classes, their initial config, the long-context flag, the
directories to add to sys.path (where mpmath is bound), and the calls as turns of steps (``[[["cd(folder='a')", ...], ...], ...]``). The backend sources sit under
``backend/`` (written in by the host from the pinned BFCL data). Output on stdout, one JSON object:
the result string of every call, and each instance's public state at the end of every turn.

A sandbox run knows only what it is given: at generation time the model's calls so far, at scoring
time either the model's calls or the ground truth's, never both. Replaying from the initial config
each time is exact because the backends seed their own random generators from the scenario.

Execution follows BFCL (eval_checker/multi_turn_eval/multi_turn_utils.py): each public method of each
involved instance is callable by its bare name, the call string is evaluated, a dict result is
JSON-encoded, an exception becomes "Error during execution: ...", and a few process-control names are
refused outright.
"""

import copy
import datetime
import importlib
import inspect
import json
import re
import sys

MODULES = {"GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
           "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
           "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control"}
STATELESS = {"MathAPI"}
PKG = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
REFUSED = {"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"}
NAME_BEFORE_PAREN = re.compile(r"\b([a-zA-Z_]\w*)\s*(?=\()")


def state_of(obj, _path=None):
    """Plain JSON of an object's public state (what BFCL's state check compares)."""
    _path = _path or set()
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        return obj.isoformat()
    if id(obj) in _path:
        return "<cycle>"  # a back-reference (a directory's parent): identity, not state
    _path = _path | {id(obj)}
    if isinstance(obj, dict):
        return {str(k): state_of(v, _path) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [state_of(v, _path) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted((state_of(v, _path) for v in obj), key=repr)
    if hasattr(obj, "__dict__"):
        out = {"__class__": type(obj).__name__}
        for k, v in vars(obj).items():
            if not k.startswith("_"):
                out[k] = state_of(v, _path)
        return out
    return repr(obj)


def main():
    job = json.load(open("job.json"))
    sys.path.insert(0, "backend")
    sys.path.extend(job.get("pythonpath", []))  # mpmath, bound read-only by itself (see multiturn.py)
    try:
        import mpmath  # noqa: F401
    except ImportError:
        sys.path.append("standin")  # see mpmath.py there: the math backend's one use of mpmath
    instances, owner = {}, {}
    for cls in job["involved_classes"]:
        mod = importlib.import_module(f"{PKG}.{MODULES[cls]}")
        inst = getattr(mod, cls)()
        if cls not in STATELESS:
            inst._load_scenario(copy.deepcopy(job["initial_config"].get(cls, {})),
                                long_context=job["long_context"])
        instances[cls] = inst
        for name, _ in inspect.getmembers(inst, predicate=inspect.ismethod):
            if not name.startswith("_"):
                owner[name] = cls
    namespace = {f"_inst_{cls}": inst for cls, inst in instances.items()}

    def qualify(m):
        name = m.group(1)
        return f"_inst_{owner[name]}.{name}" if name in owner else name

    turns_out, states = [], []
    for turn in job["turns"]:
        steps_out = []
        for step in turn:
            results = []
            for call in step:
                try:
                    head = call.split("(")[0]
                    if "." in head:
                        head = head.split(".")[1]
                    if head in REFUSED:
                        raise Exception(f"Function call {head} is not allowed.")
                    value = eval(NAME_BEFORE_PAREN.sub(qualify, call), namespace)
                    if type(value) is str:
                        pass
                    elif type(value) is dict:
                        try:
                            value = json.dumps(value)
                        except Exception:
                            value = str(value)
                    else:
                        value = str(value)
                    results.append(value)
                except Exception as e:
                    results.append(f"Error during execution: {e}")
            steps_out.append(results)
        turns_out.append(steps_out)
        states.append({cls: state_of(inst) for cls, inst in instances.items() if cls not in STATELESS})
    sys.stdout.write(json.dumps({"turns": turns_out, "states": states}))


if __name__ == "__main__":
    main()
