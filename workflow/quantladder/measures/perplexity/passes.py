"""The passes a config asks for, and the protocol each runs with: the planning the workflow does
while it builds its DAG (rules/common.smk). Imports neither numpy nor llama.cpp."""

from __future__ import annotations

from dataclasses import dataclass

from ...corpus_names import is_chat, parse_name
from ...errors import ConfigError, DataError


@dataclass
class Protocol:
    n_ctx: int = 512
    n_batch: int = 2048
    max_chunks: int = 0  # 0: all

    @property
    def first(self) -> int:
        return self.n_ctx // 2

    @property
    def rows_per_chunk(self) -> int:
        return self.n_ctx - 1 - self.first

    @property
    def n_seq(self) -> int:
        return max(1, self.n_batch // self.n_ctx)

    @property
    def piece(self) -> int:
        """Tokens of one chunk per decode call: the whole chunk, or n_batch of it (long documents)."""
        return min(self.n_ctx, self.n_batch)

    @property
    def context_tokens(self) -> int:
        """The llama.cpp context a pass needs: n_seq chunks side by side (llama-perplexity's -c)."""
        return self.n_seq * self.n_ctx

    @property
    def batch_tokens(self) -> int:
        """Tokens per decode call: n_seq whole chunks, or one piece of a long chunk."""
        return self.n_seq * self.piece


def n_chunks(n_tokens: int, proto: Protocol, source: str = "corpus") -> int:
    if n_tokens < 2 * proto.n_ctx:
        raise DataError(f"{source}: {n_tokens} tokens; the protocol needs at least 2*n_ctx = {2 * proto.n_ctx}")
    n = n_tokens // proto.n_ctx
    return min(n, proto.max_chunks) if proto.max_chunks else n


# -- the passes a config asks for ---------------------------------------------------------------
TRAINED = "trained"  # a context label: the model's trained context, read from its GGUF in the job


def _ctx_label(n_ctx) -> str:
    return TRAINED if n_ctx in (None, 0, TRAINED) else f"n{int(n_ctx)}"


def passes(cfg: dict) -> list[tuple[str, str]]:
    """(corpus, context label) of every pass: each evaluation corpus at ``n_ctx`` (label ``n512``),
    and each long-document corpus at the long context (``trained``, or ``n32768``)."""
    p = cfg["measures"]["perplexity"]
    short = f"n{int(p['n_ctx'])}"
    out = [(c, short) for c in dict.fromkeys([p["corpus"], *(p.get("corpora") or [])])]
    lg = p["long"]
    if lg["enabled"]:
        label = _ctx_label(lg["n_ctx"])
        for c in dict.fromkeys(lg["corpora"]):
            if (c, label) in out:
                raise ConfigError(f"measures.perplexity.long: corpus {c} at {label} is already an evaluation pass "
                                  "(measures.perplexity.corpora at n_ctx); give the long pass another context")
            out.append((c, label))
    for c, _ in out:  # the name is every row's subset: domain and language must be readable from it
        parse_name(c)
    return out


def family_passes(cfg: dict, family: str) -> tuple[list[tuple[str, str]], list[dict]]:
    """The passes a family takes, and those it cannot (with the reason): a chat corpus needs a chat
    model (``families.<f>.chat``), whose template renders it."""
    corpora = cfg.get("corpora") or {}
    chat = cfg["families"][family]["chat"]
    run, skipped = [], []
    for corpus, ctx in passes(cfg):
        if corpus not in corpora:
            raise ConfigError(f"measures.perplexity: corpus {corpus!r} is not defined under `corpora:` "
                              f"(known: {sorted(corpora)})")
        if is_chat(corpora[corpus]) and not chat:
            skipped.append({"corpus": corpus, "ctx": ctx, "reason": f"{family} is not a chat model (families.{family}."
                            "chat: false): a chat-templated corpus does not apply"})
        else:
            run.append((corpus, ctx))
    return run, skipped


def pass_settings(cfg: dict, corpus: str, ctx: str) -> dict:
    """What one pass (corpus, context label) runs with: its part of the point's spec."""
    p = cfg["measures"]["perplexity"]
    corpora = cfg.get("corpora") or {}
    if corpus not in corpora:
        raise ConfigError(f"measures.perplexity: corpus {corpus!r} is not defined under `corpora:` "
                          f"(known: {sorted(corpora)})")
    lg = p["long"]
    if lg["enabled"] and corpus in lg["corpora"] and ctx == _ctx_label(lg["n_ctx"]):
        n_ctx = TRAINED if ctx == TRAINED else int(lg["n_ctx"])
        n_batch, max_chunks = int(lg["n_batch"]), int(lg["max_chunks"])
    elif ctx == f"n{int(p['n_ctx'])}" and corpus in [p["corpus"], *(p.get("corpora") or [])]:
        n_ctx, n_batch, max_chunks = int(p["n_ctx"]), int(p["n_batch"]), int(p["max_chunks"])
    else:
        raise ConfigError(f"measures.perplexity: no pass of corpus {corpus!r} at context {ctx!r} "
                          f"(the passes: {passes(cfg)})")
    ov = p["overlap"]
    return {"corpus": corpus, "source": corpora[corpus], "ctx": ctx, "n_ctx": n_ctx, "n_batch": n_batch,
            "max_chunks": max_chunks, "kld": bool(p["kld"]),
            "overlap": {"ngram": int(ov["ngram"]), "flag_pct": float(ov["flag_pct"])}}


def pass_config(cfg: dict, corpus: str, ctx: str) -> dict:
    """The config with ``measures.perplexity`` narrowed to one pass, for that pass's spec key and
    manifest: adding a corpus to the list, or changing another pass, re-runs nothing else."""
    out = dict(cfg)
    out["measures"] = {**cfg["measures"], "perplexity": {"enabled": True, **pass_settings(cfg, corpus, ctx)}}
    return out


def pass_name(corpus: str, ctx: str) -> str:
    return f"{corpus}-{ctx}"


def protocol(settings: dict, n_ctx_train: int | None = None, source: str = "model") -> Protocol:
    """The pass's protocol; a ``trained`` context is the model's (GGUF ``<arch>.context_length``)."""
    n_ctx = settings["n_ctx"]
    if n_ctx == TRAINED:
        if not n_ctx_train:
            raise DataError(f"{source}: the GGUF records no trained context (<arch>.context_length); "
                            f"give measures.perplexity.long.n_ctx for corpus {settings['corpus']}")
        n_ctx = int(n_ctx_train)
    return Protocol(n_ctx=int(n_ctx), n_batch=int(settings["n_batch"]), max_chunks=int(settings["max_chunks"]))


# -- calibration overlap -----------------------------------------------------------------------
# Token n-grams, n = 13 (measures.perplexity.overlap.ngram's default in config.schema.yaml, flagged at
# overlap.flag_pct, default 1 %): the length GPT-3's contamination study used for words (Brown et al. 2020,
# appendix C), here over the model's own tokens so that scripts without word spaces count alike.
# Measured here (SmolLM2 tokens): two disjoint halves of the Debian Reference share 0.05-0.5 % of
# their 13-grams, a text with itself 100 %, alternate pydoc topics (which repeat whole sections) 55 %.
