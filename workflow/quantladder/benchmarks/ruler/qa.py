"""RULER's QA tasks: qa_1 (SQuAD) and qa_2 (HotpotQA), a real question hidden among distractor
documents (RULER scripts/data/synthetic/qa.py).

The data is fetched through huggingface_hub (a source dict as for corpora, pinned revision) or read
from a local path. Two layouts are read:
- RULER's own files: SQuAD v2 ``dev-v2.0.json`` (``{"data": [{"paragraphs": [{"context", "qas"}]}]}``,
  unanswerable questions dropped) and HotpotQA ``hotpot_dev_distractor_v1.json`` (a list of
  ``{"question", "answer", "context": [[title, [sentences]]]}``);
- the hub's parquet exports (``rajpurkar/squad_v2`` rows ``context/question/answers.text``;
  ``hotpotqa/hotpot_qa`` rows ``question/answer/context.{title,sentences}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ...errors import DataError
from .tasks import QA_PREFIX, QA_TEMPLATE, Instance, _split_template

DOCUMENT = "Document {i}:\n{document}"


@dataclass
class QAData:
    name: str
    questions: list[dict]  # {"query", "outputs": [str], "context": [doc idx], "more_context": [doc idx]}
    docs: list[str]

    def instance(self, index: int, n_docs: int, rng) -> Instance:
        if not self.questions:
            raise DataError(f"ruler qa {self.name}: the dataset has no answerable questions")
        q = self.questions[index % len(self.questions)]
        gold, more = list(q["context"]), list(q.get("more_context", []))
        if n_docs < len(self.docs):
            # qa.py: the gold documents, then documents from the same article, then random others.
            if n_docs - len(gold) > len(more):
                taken = set(gold) | set(more)
                others = [i for i in range(len(self.docs)) if i not in taken]
                picked = gold + more + rng.sample(others, max(0, n_docs - len(gold) - len(more)))
            else:
                picked = gold + rng.sample(more, max(0, n_docs - len(gold)))
        else:
            picked = list(range(len(self.docs)))
        rng.shuffle(picked)
        context = "\n\n".join(DOCUMENT.format(i=i + 1, document=self.docs[d]) for i, d in enumerate(picked))
        head, tail = _split_template(QA_TEMPLATE, query=q["query"])
        gold_pos = [picked.index(g) + 1 for g in gold if g in picked]
        return Instance(text=head + context + tail, answer_prefix=QA_PREFIX, answers=list(q["outputs"]),
                        meta={"size": n_docs, "question_index": index % len(self.questions),
                              "gold_documents": gold_pos})


def _index_docs(texts: list[str]) -> tuple[list[str], dict[str, int]]:
    docs = sorted(set(texts))
    return docs, {d: i for i, d in enumerate(docs)}


def read_squad(records: list[dict]) -> QAData:
    """records: {"title", "context", "question", "answers": [str]} (answerable only)."""
    docs, idx = _index_docs([r["context"] for r in records])
    by_title: dict[str, set[int]] = {}
    for r in records:
        by_title.setdefault(r.get("title", ""), set()).add(idx[r["context"]])
    qs = []
    for r in records:
        if not r["answers"]:
            continue
        own = idx[r["context"]]
        qs.append({"query": r["question"], "outputs": list(r["answers"]), "context": [own],
                   "more_context": sorted(i for i in by_title.get(r.get("title", ""), ()) if i != own)})
    return QAData("squad", qs, docs)


def read_hotpotqa(records: list[dict]) -> QAData:
    """records: {"question", "answer", "context": [(title, [sentences])]}."""
    def doc(title, sents):
        return f"{title}\n{''.join(sents)}"

    docs, idx = _index_docs([doc(t, s) for r in records for t, s in r["context"]])
    qs = [{"query": r["question"], "outputs": [r["answer"]], "context": [idx[doc(t, s)] for t, s in r["context"]]}
          for r in records]
    return QAData("hotpotqa", qs, docs)


def _records_from_file(name: str, path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        if name == "squad":
            return [{"title": r.get("title", ""), "context": r["context"], "question": r["question"],
                     "answers": list(dict.fromkeys(r["answers"]["text"]))} for r in rows]
        return [{"question": r["question"], "answer": r["answer"],
                 "context": list(zip(r["context"]["title"], r["context"]["sentences"]))} for r in rows]
    doc = json.loads(path.read_text(encoding="utf-8"))
    if name == "squad":
        out = []
        for art in doc["data"]:
            for p in art["paragraphs"]:
                for qa in p["qas"]:
                    if qa.get("is_impossible"):
                        continue
                    out.append({"title": art.get("title", ""), "context": p["context"], "question": qa["question"],
                                "answers": [a["text"] for a in qa["answers"]]})
        return out
    return [{"question": r["question"], "answer": r["answer"], "context": [tuple(c) for c in r["context"]]}
            for r in doc]


def load(name: str, source: dict, limit: int | None = None) -> tuple[QAData, Path]:
    """Load one QA dataset ('squad' or 'hotpotqa') from its source; returns the data and the file."""
    from ...models import resolve_source  # numpy: loaded when QA data is, not when the benchmarks are listed

    if name not in ("squad", "hotpotqa"):
        raise DataError(f"benchmarks.ruler.qa: unknown dataset {name!r} (squad, hotpotqa)")
    path = Path(resolve_source({k: v for k, v in source.items() if k in ("hf", "path", "package", "file")}))
    try:
        records = _records_from_file(name, path)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: not a {name} file in RULER's or the hub's layout: {type(e).__name__}: {e}") from e
    if limit:
        records = records[:limit]
    data = read_squad(records) if name == "squad" else read_hotpotqa(records)
    return data, path
