#!/usr/bin/env python3
"""Rendering parity with llama-server (issue 43): every chat template vendored under llama.cpp's
models/templates/ (in the llama-cpp-python sdist the project pins) × a fixed set of conversations ×
the reasoning settings its format takes, rendered by quantladder's one renderer (renderer version
``quantladder.reasoning.RENDERER_VERSION``: ``reasoning.render``, what ``Engine.chat_prompt`` calls
for every family) and by llama.cpp's own
renderer (``llama-server --jinja --chat-template-file T``, ``POST /apply-template`` on loopback;
built from the same vendored source by ``llama_tools.extra_tool``), compared byte for byte.

One server per template (the embedded SmolLM2 as its model: its BOS/EOS texts are the ones both
renderers write). Each cell is one of:

- ``identical``: both renderings equal, byte for byte;
- ``refused``: quantladder refuses it with a reason (a setting the family cannot honour, a tool call,
  a template it cannot render as the server does); ``raw`` says whether jinja2 would have matched;
- ``both_reject``: the server answers an error and quantladder's renderer raises too;
- ``differs``: both render, differently (the first differing character is shown);
- ``raises`` / ``server_rejects``: only one side renders.

    .venv/bin/python benchmarks/template_parity.py                  # all templates, the table
    .venv/bin/python benchmarks/template_parity.py --templates Qwen-Qwen3-0.6B --show
    .venv/bin/python benchmarks/template_parity.py --json build/template_parity.json
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import REPO, fmt_table

from quantladder import reasoning as R
from quantladder.errors import QuantladderError
from quantladder.llama_server import LlamaServer

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city's name"}},
                   "required": ["city"]}}}]

# The fixed conversations, each ending on a user turn (or a tool result) and rendered with the
# generation prompt: what the exams and traffic files send (system, user and assistant turns, an
# earlier turn's reasoning as the server replays it), and a tool call with its result and the tools
# offered (no exam passes them; the renderer refuses them, and the sweep says how jinja2 would fare).
CONVERSATIONS: dict[str, dict] = {
    "user": {"messages": [{"role": "user", "content": "What is 2 + 2?"}]},
    "system": {"messages": [{"role": "system", "content": "You are a careful assistant."},
                            {"role": "user", "content": "What is 2 + 2?"}]},
    "turns": {"messages": [{"role": "system", "content": "You are a careful assistant."},
                           {"role": "user", "content": "Name a prime number."},
                           {"role": "assistant", "content": "7"},
                           {"role": "user", "content": "And one larger than 100?"}]},
    "reasoning": {"messages": [{"role": "user", "content": "Is 91 prime?"},
                               {"role": "assistant", "content": "No: 91 = 7 x 13.",
                                "reasoning_content": "Try small primes: 91 / 7 = 13."},
                               {"role": "user", "content": "And 97?"}]},
    "tool": {"messages": [{"role": "user", "content": "What is the weather in Paris?"},
                          {"role": "assistant", "content": "",
                           "tool_calls": [{"id": "call_1", "type": "function",
                                           "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                          {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18}'}],
             "tools": TOOLS},
}


def settings_for(fmt: R.Format) -> list[tuple[str, R.Settings | None, dict]]:
    """The settings a template is rendered at: (label, quantladder's settings or None for a config
    that sets no reasoning key, the request's chat_template_kwargs that give the server the same).
    Every template: no key set (the server's defaults); a format that thinks: reasoning on and off
    (``enable_thinking``); harmony: two efforts too; the others: reasoning off (a key set on a
    template that cannot think; refused for an ``other`` family)."""
    out: list[tuple[str, R.Settings | None, dict]] = [("default", None, {})]
    if fmt.kind in (R.TAGS, R.HARMONY):
        out += [("on", R.Settings("on"), {"enable_thinking": True}),
                ("off", R.Settings("off"), {"enable_thinking": False})]
    else:
        out.append(("off", R.Settings("off"), {"enable_thinking": False}))
    if fmt.kind == R.HARMONY:
        out += [("effort=low", R.Settings("auto", "low"), {"reasoning_effort": "low"}),
                ("effort=high", R.Settings("auto", "high"), {"reasoning_effort": "high"})]
    return out


def vendored_templates(sdist: Path, dest: Path) -> dict[str, Path]:
    """llama.cpp's models/templates/*.jinja out of the sdist, by name."""
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if "/vendor/llama.cpp/models/templates/" in m.name and m.name.endswith(".jinja")]
        tar.extractall(dest, members=members, filter="data")
    return {p.name[:-len(".jinja")]: p for p in sorted(dest.rglob("*.jinja"))}


def llama_cpp_version(sdist: Path) -> str:
    """The vendored llama.cpp's build number and commit as its sdist records them (vendor/llama.cpp's
    cmake/build-info.cmake reads git, absent from an sdist: the commit llama-cpp-python pins is in
    its own CHANGELOG), else 'unknown'."""
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            if m.name.endswith("/CHANGELOG.md") and m.name.count("/") == 1:
                text = tar.extractfile(m).read().decode(errors="replace")
                for line in text.splitlines():
                    if "llama.cpp@" in line:
                        return line.split("llama.cpp@", 1)[1].split()[0].strip(" `)")
    return "unknown"


def special_texts(model: Path) -> tuple[str, str]:
    """The model's BOS and EOS texts, as both renderers give them to a template."""
    from quantladder.gguf_meta import scan_header

    fields, _ = scan_header(model)
    tokens = fields.get("tokenizer.ggml.tokens") or []

    def text(key: str) -> str:
        i = fields.get(key)
        return str(tokens[int(i)]) if i is not None and 0 <= int(i) < len(tokens) else ""

    return text("tokenizer.ggml.bos_token_id"), text("tokenizer.ggml.eos_token_id")


class Server(LlamaServer):
    """One llama-server on loopback with one chat template; ``apply(body)`` is its /apply-template."""

    def __init__(self, exe: str | Path, model: Path, template: Path, log: Path):
        super().__init__(exe, ["--jinja", "--chat-template-file", str(template), "-m", str(model), "-t", "1",
                               "-c", "256", "-np", "1", "--no-warmup"], log=log, ready_s=60)

    def apply(self, body: dict) -> tuple[bool, str]:
        status, got = self.request("/apply-template", body, timeout=60)
        return (True, got["prompt"]) if status == 200 else (False, str(got)[:500])


@functools.lru_cache(maxsize=16)
def _formatter(template: str, bos: str, eos: str, server: bool):
    return R.formatter(template, bos, eos, True, server)


def ours(name: str, template: str, fmt: R.Format, settings: R.Settings | None, conv: dict, bos: str, eos: str,
         raw: bool = False) -> tuple[str, str]:
    """quantladder's rendering of one cell, as generation renders it: ``("ok", prompt)``,
    ``("refused", reason)`` (a ConfigError: the family's setup or the renderer refuses) or
    ``("raises", error)`` (the template's own error). ``raw``: the rendering past the refusals (the
    server's message rewrites and the kwargs, tools included), to say how jinja2 would fare."""
    setup = R.Setup(name, fmt, settings or R.Settings(), settings is not None)
    try:  # what reasoning.setup_for refuses for this family and settings
        if settings is not None:
            R.check_family(fmt, settings, name, "sweep")
        R.check_rendering(fmt, template, name, "sweep")
    except QuantladderError as e:
        if not raw:
            return "refused", str(e)
        setup = R.Setup(name, fmt, settings or R.Settings(), True)
    kwargs = dict(setup.kwargs)
    if conv.get("tools"):
        kwargs["tools"] = conv["tools"]
    messages = copy.deepcopy(conv["messages"])
    try:
        f = _formatter(template, bos, eos, True)
        if raw:
            msgs = R.server_messages(template, messages, R.supports_system_role(f, template))
            return "ok", R.render_context(f, msgs, kwargs)
        return "ok", R.render(f, template, messages, kwargs)
    except QuantladderError as e:
        return "refused", str(e)
    except Exception as e:  # noqa: BLE001 (a template's own error, whatever its kind)
        return "raises", f"{type(e).__name__}: {e}"


def first_difference(a: str, b: str) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at character {i}: server {a[max(0, i - 20):i + 50]!r} / quantladder {b[max(0, i - 20):i + 50]!r}"


def compare_template(name: str, path: Path, exe: str | Path, model: Path, workdir: Path,
                     conversations: dict[str, dict] | None = None) -> list[dict]:
    """Every cell of one template: one server, every setting × conversation."""
    template = path.read_text()
    fmt = R.detect(template)
    bos, eos = special_texts(model)
    rows = []
    with Server(exe, model, path, workdir / f"{name}.server.log") as server:
        for label, settings, server_kwargs in settings_for(fmt):
            for cname, conv in (conversations or CONVERSATIONS).items():
                body = {"messages": conv["messages"]}
                if conv.get("tools"):
                    body["tools"] = conv["tools"]
                if server_kwargs:
                    body["chat_template_kwargs"] = server_kwargs
                s_ok, s = server.apply(body)
                q_kind, q = ours(name, template, fmt, settings, conv, bos, eos)
                row = {"template": name, "format": fmt.name, "handler": R.server_handler(template) or "autoparser",
                       "setting": label, "conversation": cname}
                if q_kind == "refused":
                    r_kind, r = ours(name, template, fmt, settings, conv, bos, eos, raw=True)
                    raw = ("identical" if s_ok and r_kind == "ok" and r == s else
                           "server rejects" if not s_ok else f"differs {first_difference(s, r)}" if r_kind == "ok"
                           else r)
                    row.update(verdict="refused", detail=q, raw=raw)
                elif not s_ok:
                    ours_too = f"; quantladder: {q[:200]}" if q_kind == "raises" else ""
                    row.update(verdict="both_reject" if q_kind == "raises" else "server_rejects",
                               detail=f"server: {s[:200]}{ours_too}")
                elif q_kind == "raises":
                    row.update(verdict="raises", detail=q[:300])
                elif s == q:
                    row.update(verdict="identical", detail="")
                else:
                    row.update(verdict="differs", detail=first_difference(s, q))
                row["server_prompt"], row["quantladder_prompt"] = (s if s_ok else None), (q if q_kind == "ok" else None)
                rows.append(row)
    return rows


def sweep(names: list[str] | None, exe: str | Path, model: Path, workdir: Path, sdist: Path, log=print) -> list[dict]:
    templates = vendored_templates(sdist, workdir / "templates")
    rows = []
    for name, path in templates.items():
        if names and name not in names:
            continue
        got = compare_template(name, path, exe, model, workdir)
        rows += got
        bad = [f"{r['setting']}/{r['conversation']}:{r['verdict']}" for r in got if r["verdict"] != "identical"]
        log(f"{name} ({got[0]['format']}): {len(got)} cells" + (f"; not identical: {' '.join(bad)}" if bad else ""))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", nargs="*", help="template names (default: every vendored one)")
    ap.add_argument("--model", help="a GGUF the server loads (default: the embedded SmolLM2, dequantized to F16)")
    ap.add_argument("--server", help="llama-server (default: quantladder.llama_tools.extra_tool)")
    ap.add_argument("--workdir", default=str(REPO / "build" / "template-parity"))
    ap.add_argument("--json", help="write every cell (both prompts) here")
    ap.add_argument("--show", action="store_true", help="print every cell that is not identical, with its detail")
    a = ap.parse_args()
    from quantladder import llama_tools

    from _common import embedded_ladder

    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    exe = a.server or llama_tools.extra_tool("llama-server")
    model = Path(a.model) if a.model else embedded_ladder([], workdir / "models")["F16"]
    version = llama_tools.library_version()
    sdist = llama_tools.fetch_sdist(version, llama_tools.cache_root() / "sdist")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        t0 = time.monotonic()
        rows = sweep(a.templates, exe, model, Path(tmp), sdist)
        seconds = time.monotonic() - t0
    by_t: dict[str, Counter] = {}
    for r in rows:
        by_t.setdefault(r["template"], Counter())[r["verdict"]] += 1
    fmts = {r["template"]: (r["format"], r["handler"]) for r in rows}
    kinds = ("identical", "refused", "both_reject", "differs", "raises", "server_rejects")
    table = [[t, *fmts[t], *(c.get(k, 0) for k in kinds)] for t, c in by_t.items()]
    print(fmt_table(["template", "format", "server handler", *kinds], table))
    total = Counter(r["verdict"] for r in rows)
    print(f"\n{len(by_t)} templates, {len(rows)} cells ({len(CONVERSATIONS)} conversations × settings) in "
          f"{seconds:.0f} s; renderer {R.RENDERER_VERSION}, llama-cpp-python {version}, vendored llama.cpp "
          f"{llama_cpp_version(sdist)}: "
          + ", ".join(f"{k} {total.get(k, 0)}" for k in kinds))
    refused_raw = Counter(r["raw"].split(" at ")[0][:60] for r in rows if r["verdict"] == "refused")
    if refused_raw:
        print("refused cells, as jinja2 would have rendered them: "
              + "; ".join(f"{k}: {n}" for k, n in refused_raw.most_common()))
    if a.show:
        for r in rows:
            if r["verdict"] != "identical":
                print(f"- {r['template']} {r['setting']}/{r['conversation']}: {r['verdict']}: {r['detail'][:400]}"
                      + (f" [raw: {r['raw'][:200]}]" if "raw" in r else ""))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(rows, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
