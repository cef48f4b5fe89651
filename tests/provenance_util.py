"""Third-party files made here: a GGUF copied with the `gguf` package (GGUFReader -> GGUFWriter) with
one change to its header, as an uploader's conversion would differ from the family's reference
(issue 44). The tensors are copied byte for byte, so the file loads and measures like the original.

    python tests/provenance_util.py SRC OUT_DIR   # every mutation of SRC, one file each
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# A mutation: {key: new value | a function of the old value | DROP}; a new key gives its GGUF type
# as (value, GGUFValueType name[, element type name]).
DROP = object()


class Source:
    """A GGUF read once with GGUFReader (its 49k-entry arrays take seconds to read), written again as
    many times as asked, each with its own changes."""

    def __init__(self, src: str | Path):
        import gguf

        self.path = Path(src)
        self.reader = gguf.GGUFReader(str(src), "r")
        self.arch = self.reader.fields["general.architecture"].contents()
        self.fields = []
        for name, field in self.reader.fields.items():
            if name.startswith("GGUF.") or name == "general.architecture":
                continue  # the reader's own entries (version, counts), and the writer's
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            self.fields.append((name, vtype, sub, field.contents()))

    def write(self, dst: str | Path, edits: dict[str, Any]) -> Path:
        """The file rewritten to ``dst`` with ``edits`` applied to its metadata (all else as it was)."""
        import gguf

        dst = Path(dst)
        dst.parent.mkdir(parents=True, exist_ok=True)
        w = gguf.GGUFWriter(str(dst), self.arch)  # writes general.architecture itself
        todo = dict(edits)
        for name, vtype, sub, value in self.fields:
            if name in todo:
                edit = todo.pop(name)
                if edit is DROP:
                    continue
                value = edit(value) if callable(edit) else edit
            if name == "general.alignment":
                w.add_custom_alignment(int(value))
                continue
            w.add_key_value(name, value, vtype, sub_type=sub)
        for name, edit in todo.items():  # keys the file did not have
            if edit is DROP or callable(edit):
                raise KeyError(f"{self.path}: no key {name} to change")
            value, *types = edit
            w.add_key_value(name, value, gguf.GGUFValueType[types[0]],
                            sub_type=gguf.GGUFValueType[types[1]] if len(types) > 1 else None)
        tensors = self.reader.tensors
        for t in tensors:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in tensors:
            w.write_tensor_data(t.data)
        w.close()
        return dst


def mutate(src: str | Path, dst: str | Path, edits: dict[str, Any]) -> Path:
    """``src`` rewritten to ``dst`` with ``edits`` applied to its metadata."""
    return Source(src).write(dst, edits)


def _swap_first_merges(merges: list[str]) -> list[str]:
    return [merges[1], merges[0], *merges[2:]]


def _other_system_prompt(template: str) -> str:
    """SmolLM2's template with another default system prompt: it renders every conversation that has
    no system message of its own differently."""
    assert "You are a helpful AI assistant named SmolLM" in template, template[:200]
    return template.replace("You are a helpful AI assistant named SmolLM", "You are a pirate named Bluebeard")


def _spaces_inside_tags(template: str) -> str:
    """The same template with more whitespace inside its tags, where Jinja ignores it: it renders the same."""
    assert "{% for " in template
    return template.replace("{% for ", "{%   for ").replace("{% endfor %}", "{%  endfor  %}")


def mutations(arch: str = "llama") -> dict[str, tuple[dict, list[str]]]:
    """name -> (edits, the keys the check must name), for a file with SmolLM2's tokenizer and template."""
    return {
        "template": ({"tokenizer.chat_template": _other_system_prompt}, ["tokenizer.chat_template"]),
        "template-whitespace": ({"tokenizer.chat_template": _spaces_inside_tags}, []),
        "merge": ({"tokenizer.ggml.merges": _swap_first_merges}, ["tokenizer.ggml.merges"]),
        "eos": ({"tokenizer.ggml.eos_token_id": lambda v: int(v) + 1}, ["tokenizer.ggml.eos_token_id"]),
        "rope": ({f"{arch}.rope.scaling.type": ("linear", "STRING"), f"{arch}.rope.scaling.factor": (2.0, "FLOAT32"),
                  f"{arch}.context_length": lambda v: 2 * int(v)},
                 [f"{arch}.rope.scaling.type", f"{arch}.rope.scaling.factor", f"{arch}.context_length"]),
        "imatrix": ({"quantize.imatrix.file": ("/elsewhere/other.imatrix", "STRING"),
                     "quantize.imatrix.dataset": ("/elsewhere/calibration_datav3.txt", "STRING"),
                     "quantize.imatrix.chunks_count": (125, "INT32")}, []),
    }


def write_all(src: str | Path, out_dir: str | Path, only: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Every mutation (or those named) of ``src``, one file each: ``<stem>.<mutation>.gguf``."""
    source = Source(src)
    return {name: source.write(Path(out_dir) / f"{Path(src).stem}.{name}.gguf", edits)
            for name, (edits, _) in mutations(source.arch).items() if only is None or name in only}


if __name__ == "__main__":
    for name, path in write_all(sys.argv[1], sys.argv[2]).items():
        print(name, path)

