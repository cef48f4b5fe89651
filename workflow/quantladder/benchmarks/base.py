"""The Benchmark interface: what every task benchmark declares and does, and nothing else.

A task is data + prompts + scorer + declared metrics (lm-evaluation-harness's task, inspect_ai's
``Task(dataset, solver, scorer)``). One module per exam subclasses :class:`Benchmark`; the package's
one generation loop (:mod:`quantladder.generation`), the generic rules (``rules/tasks.smk``) and the
manifest (:mod:`quantladder.manifest`) do the rest. A new benchmark is a module plus a config
section: nothing in ``rules/`` to copy.

The stages, each a rule:
  source   fetch and pin the data once (``fetch_source``; may download: runs on the submit host)
  items    the family's items, fixed and ordered (``build_items``; may use the reference rung's
           tokenizer and chat template, RULER does)
  generate per point: the one loop drives ``drive(item, engine)`` for every item, batched, resumable
  score    per point, from the saved generations only (``verdicts`` then ``metric_rows``)

Its config section's keys are split by what they change (the manifest builds one key from each):
``item_settings`` choose or build the items; ``generation_settings`` change a reply to a given item;
``scoring_settings`` change only the verdicts; ``run_settings`` change no figure (``enabled``, time
caps). Every key of the section's schema is in exactly one group (tests/test_benchmarks.py checks it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generator

from .. import REPO_ROOT, schemas
from ..engine import Generation, Request
from ..errors import ConfigError, DataError
from ..io import ITEMS, JsonlFile, verify_sha256


def record_path(path) -> str:
    """A data file's path as a source record (``source.json``) keeps it: relative to the working
    directory when the file lies under it (the checkout's config/tasks/, its .venv's package data,
    resources/), else relative to the repository when it lies there, else absolute (a file elsewhere,
    the hub's cache). A copied or moved checkout then reads its own files, not the original's
    (``data_path`` reads it back)."""
    p = Path(path).expanduser().resolve()
    for root in (Path.cwd().resolve(), REPO_ROOT):
        try:
            return str(p.relative_to(root))
        except ValueError:
            continue
    return str(p)


def data_path(recorded) -> Path:
    """A path from a source record: absolute as it is; relative, under the working directory where it
    is there, else under the repository (``record_path``'s two roots, in its order)."""
    p = Path(recorded).expanduser()
    if p.is_absolute() or p.exists() or not (REPO_ROOT / p).exists():
        return p
    return REPO_ROOT / p


def reply_plan(engine, prompt: str, generation_prompt: str | None = None):
    """The engine's ReplyPlan for a rendered prompt (None: not a thinking family's engine)."""
    plan = getattr(engine, "reply_plan", None)
    return plan(prompt, generation_prompt) if plan is not None else None


@dataclass(frozen=True)
class Item:
    """One item of a benchmark, as the items file stores it (JSON)."""

    id: str
    subset: str | None = None  # category / task / split label; None when the benchmark has none
    n_ctx: int | None = None  # per-sequence context to generate it at; None: the section's n_ctx
    data: dict = field(default_factory=dict)  # what the prompt is made of
    answer: dict = field(default_factory=dict)  # what only the scorer reads (tests, ground truth)

    def to_json(self) -> dict:
        return {"id": self.id, "subset": self.subset, "n_ctx": self.n_ctx, "data": self.data, "answer": self.answer}

    @classmethod
    def from_json(cls, d: dict) -> "Item":
        return cls(id=str(d["id"]), subset=d.get("subset"), n_ctx=d.get("n_ctx"), data=d.get("data") or {},
                   answer=d.get("answer") or {})


def read_items(item_file) -> tuple[list[Item], dict]:
    """A family's items and their ``items.json``, the file checked against the count and sha256 that
    record holds (every consumer reads them here: a line deleted from the file is an error, never a
    smaller plan that looks complete)."""
    records, meta = JsonlFile(item_file, ITEMS).read_declared()
    return [Item.from_json(r) for r in records], meta


@dataclass
class Env:
    """What drivers and scorers use besides the items: the source record (data paths) and, where a
    benchmark needs one, the sandbox executor (BFCL multi-turn). Made by ``Benchmark.open_env``."""

    source: dict
    executor: Any = None

    @property
    def root(self) -> str:
        return self.source.get("root", "")


@dataclass
class ScoringContext:
    """What a scorer may use besides the items and generations."""

    env: Env
    threads: int = 1
    log: Any = None

    @property
    def source(self) -> dict:
        return self.env.source


class Benchmark:
    """Subclass per exam; class attributes declare, methods do."""

    name: ClassVar[str]
    description: ClassVar[str]
    # What the exam measures, in the words the report ranks a rung's losses by ("code", "arithmetic",
    # "long context", ...): exams of one domain sit together there. None: the exam's own name.
    domain: ClassVar[str | None] = None
    version: ClassVar[str]  # items and prompts: bump when a prompt or an item changes (regenerates)
    scorer_version: ClassVar[str]  # bump when a verdict changes (rescores only)
    needs_chat: ClassVar[bool] = True  # prompts go through the chat template: a base model cannot take it
    per_family_items: ClassVar[bool] = False  # items depend on the model's tokenizer (RULER)
    executes_model_code: ClassVar[bool] = False  # scoring runs model-written code (in the sandbox only)
    item_settings: ClassVar[tuple[str, ...]] = ()
    generation_settings: ClassVar[tuple[str, ...]] = ()
    scoring_settings: ClassVar[tuple[str, ...]] = ()
    run_settings: ClassVar[tuple[str, ...]] = ("enabled", "time_budget_s")
    # Every benchmark may override the global `generation:` settings (sequences decoded together):
    # they change replies, so they belong to the generation key. `early_stop` (docs/statistics.md)
    # decides which items a rung generates, so it is part of that key too.
    COMMON_GENERATION: ClassVar[tuple[str, ...]] = ("n_parallel", "early_stop")
    def __init__(self, section: dict | None = None):
        self.settings = self.resolve(section or {})
        self.planned: dict[str, str] = {}  # the content digests this job was planned with (expect)

    # -- what a job read is what its key names (docs/your-tasks.md, "Edits during a run") -----------
    def content_digests(self, which: str) -> dict[str, str]:
        """The digests, in key group ``which`` (items / scoring), of the user's files whose content
        enters that key (a local task or traffic file), as read now. At DAG-build time they go into the
        rules' ``params``; in the job, every read of such a file is checked against them (``check_read``).
        Data pinned by sha256 in its source record is verified by ``verify_source`` instead."""
        return {k: v for k, v in self.group(which).items() if k.endswith("_sha256")}

    def expect(self, planned: dict[str, str]) -> None:
        """This job was planned with ``planned``: refuse it now if the file already reads otherwise."""
        self.planned = dict(planned)
        self.check_read(self.content_path() or self.name,
                        {**self.content_digests("items"), **self.content_digests("scoring")})

    def content_path(self) -> str | None:
        return None

    def check_read(self, path, found: dict[str, str]) -> None:
        """Stop the job, naming the file and both digests, when what it read is not what it was planned
        with: the file was edited after `snakemake` planned the run (a revert later would otherwise
        leave figures made from a file no one has)."""
        for what, digest in found.items():
            want = self.planned.get(what)
            if want is not None and want != digest:
                raise DataError(
                    f"{path}: its {what.replace('_sha256', '')} digest is {digest} as this job read it, but the "
                    f"run was planned with {want}: the file changed after `snakemake` planned the run, so "
                    "nothing is written from it; run snakemake again (it plans again from the file as it is)")

    # -- settings -----------------------------------------------------------------------------
    @classmethod
    def resolve(cls, section: dict) -> dict:
        """The section with its schema's defaults filled (config/schemas/<name>.schema.yaml, the one
        place a default is written), for callers that did not validate against the schema."""
        return schemas.filled(schemas.benchmark_schema_path(cls.name), section)

    def group(self, which: str) -> dict:
        keys = {"items": self.item_settings, "generation": self.generation_settings + self.COMMON_GENERATION,
                "scoring": self.scoring_settings}[which]
        return {k: self.settings.get(k) for k in keys}

    # -- data ---------------------------------------------------------------------------------
    def fetch_source(self, dest: str) -> dict:
        """Obtain the data (once per config); returns the record that pins it (name, version, sha256, paths)."""
        raise NotImplementedError

    def pinned_files(self, source: dict) -> dict[str, str]:
        """The data files the source record pins, path -> sha256 (by default the record's ``files``
        under its ``root``); a benchmark whose record pins its content another way says so here."""
        root = Path(source.get("root") or "")
        return {str(root / rel): digest for rel, digest in (source.get("files") or {}).items()}

    def verify_source(self, source: dict, record_path: str) -> None:
        """Every pinned data file still has the bytes its record names (before items are built, replies
        generated or verdicts given from it)."""
        for path, digest in self.pinned_files(source).items():
            path = data_path(path)
            if not path.is_file():
                raise DataError(f"{path}: missing ({record_path} pins it); delete {record_path} and run snakemake "
                                "again to fetch the data again")
            verify_sha256(path, digest, what=f"{self.name} data file", recorded_in=record_path)

    def build_items(self, source: dict, *, reference_gguf: str | None, family: dict, threads: int = 1,
                    log=None) -> tuple[list[Item], dict]:
        """The items in their fixed order, and facts about them for the manifest (dropped lengths, ...)."""
        raise NotImplementedError

    def n_ctx(self, item: Item) -> int:
        """The item's context: its own where it has one (a RULER length), else the benchmark's ``n_ctx``
        (its schema's default filled in by :meth:`resolve`)."""
        return int(item.n_ctx or self._own_n_ctx())

    def max_n_ctx(self, n_ctx_train: int | None = None) -> int:
        """The longest per-sequence context any item may need (sizes the job's memory); ``n_ctx_train``,
        the model's trained context where known, resolves a length given as ``trained``."""
        return self._own_n_ctx()

    def _own_n_ctx(self) -> int:
        if "n_ctx" not in self.settings:  # a benchmark whose schema has no n_ctx sizes each item (max_n_ctx)
            raise ConfigError(f"benchmarks.{self.name}: its schema ({schemas.benchmark_schema_path(self.name).name}) "
                              "has no n_ctx and this item or call names none: give the items their n_ctx "
                              "or override max_n_ctx")
        return int(self.settings["n_ctx"])

    # -- generation ---------------------------------------------------------------------------
    def drive(self, item: Item, engine, env: Env) -> Generator:
        """Yield ``engine.Request``s, receive ``engine.Generation``s, return the item's record (a dict
        with at least ``text``, ``n_prompt_tokens``, ``n_gen_tokens``, ``finish_reason``). Nothing
        here executes what the model wrote, except inside the sandbox (BFCL multi-turn)."""
        raise NotImplementedError

    @staticmethod
    def ask(engine, prompt: str, max_tokens: int, stop=(), generation_prompt: str | None = None
            ) -> Generator[Request, Generation, Generation]:
        """One request for a rendered prompt (``yield from`` in a driver): the Generation it gets. A
        thinking family's request carries its ReplyPlan (``Engine.reply_plan``: the budget, the split;
        ``generation_prompt``, the reply's turn, where the prompt was rendered by another engine), so
        ``max_tokens`` counts the answer and the Generation's ``answer`` is what the exam reads."""
        return (yield Request(engine.prompt_tokens(prompt), int(max_tokens), tuple(stop),
                              reasoning=reply_plan(engine, prompt, generation_prompt)))

    def ask_user(self, engine, content: str) -> Generator[Request, Generation, dict]:
        """The single-turn chat driver: ``content`` as the user's turn, ``max_new_tokens`` of reply."""
        gen = yield from self.ask(engine, engine.chat_prompt([{"role": "user", "content": content}]),
                                  self.settings["max_new_tokens"])
        return gen.record()

    def open_env(self, source: dict, stage: str) -> Env:
        """The job's environment for ``stage`` ("generate" or "score"); a sandbox executor where needed."""
        return Env(source)

    def scoring_setup(self) -> dict:
        """Check what scoring needs before anything runs (the sandbox backend) and describe it for the
        manifest; raises a QuantladderError with install instructions where it is missing."""
        return {}

    def item_weights(self, verdicts: list[dict]) -> dict[str, float] | None:
        """Per-item weights of the headline when it is a weighted mean of verdicts (None: plain mean)."""
        return None

    # -- scoring ------------------------------------------------------------------------------
    def verdicts(self, items: list[Item], generations: dict[str, dict], ctx: ScoringContext) -> list[dict]:
        """One verdict per item with a generation: ``{item_id, correct, error_type, subset, ...}``
        (``score`` in [0, 1] where items earn partial credit, ``n_ctx`` where items have lengths)."""
        raise NotImplementedError

    def no_reply_verdict(self, item: Item, ctx: ScoringContext) -> dict:
        """The benchmark's own verdict fields for an item that got no reply: its prompt is longer than
        its context, so it was never decoded and the score stage fails it (``prompt_too_long``)
        without calling ``verdicts``. What a failed item holds there (a score of 0, its checks
        failed), so that its verdict has the shape of every other one and ``metric_rows`` counts it
        as a failed item; a figure of the reply itself (its length) leaves it out."""
        return {}

    def metric_rows(self, verdicts: list[dict], items: list[Item]) -> list[dict]:
        """The benchmark's own figures (``quantladder.metrics.row``); the generic ones (errors by
        type, loops, generation cost) are added by the score stage. ``verdicts`` holds the score
        stage's ``prompt_too_long`` verdicts too (``no_reply_verdict``)."""
        raise NotImplementedError

    # -- early stopping -----------------------------------------------------------------------
    @property
    def early_stop(self) -> dict | None:
        """The benchmark's early-stopping settings when switched on (docs/statistics.md), else None.
        It needs verdicts while generating, so a benchmark that runs model-written code to score
        (the code suites) cannot stop early: scoring happens on the scoring host, after generation."""
        es = self.settings.get("early_stop") or {}
        if not es.get("enabled"):
            return None
        if self.executes_model_code:
            raise ConfigError(f"benchmarks.{self.name}.early_stop: {self.name} scores by running model-written code "
                              "on the scoring host, after generation, so it cannot stop early")
        return {"alpha": 0.05, "margin": None, "seed": 0, **es}

    def order(self, items: list[Item]) -> list[Item]:
        """The order items are generated in. With early stopping on, a seeded shuffle fixed before any
        result is known (the sequential test assumes exchangeable items)."""
        es = self.early_stop
        if not es:
            return items
        out = list(items)
        random.Random(f"early-stop:{es['seed']}").shuffle(out)
        return out

    # -- anchor -------------------------------------------------------------------------------
    # The anchor gate (quantladder.anchors) runs an anchor entry; here is only what it runs with.

    def anchor_bench(self, entry: dict) -> "Benchmark":
        """This benchmark as the anchor entry runs it: the published protocol's generation settings
        (the entry's, else the benchmark's defaults), never the points' own (a quick run's
        ``max_new_tokens`` does not change what the anchor reproduces, nor re-run its gate); the
        data source and scoring settings of the config, the entry's over them."""
        gen = set(self.group("generation"))
        own = {k: v for k, v in self.settings.items() if k not in gen}
        return type(self)({**own, **(entry.get("settings") or {})})
