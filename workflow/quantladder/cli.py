"""`quantladder`: the small command line over the dataset.

    quantladder recommend --mem 24GiB --ctx 32768 --dataset results/<card>/points.parquet \
        [--kv f16,q8_0] [--min-tps 20] [--parallel 1] [--weight bfcl=1 --weight ruler=2] [--card NAME] [--json]
        [--tolerance pass_at_1=1 --tolerance kld_mean=0.01] [--cautious] [--corpus wikitext-2]
    quantladder pack --cards L4=24GiB,L4b=24GiB --ctx 8192 --dataset ... [--families a,b] [--require-all]
    quantladder report [--configfile config/full.yaml] [--directory DIR] [--card NAME]
        (while a run goes on, or after it stopped: the report of whatever points are finished, with
        what is left and its estimated time, in results/<card>/partial/)
    quantladder report results/<card>/points.parquet results/<card>/report.html [--card NAME]
    quantladder plan --detect 2 --dataset results/<card>/points.parquet [--power 0.8] [--alpha 0.05]
        [--config config/config.yaml] [--comparisons M] [--card NAME] [--json]
    quantladder find --family F --mem 8GiB --ctx 16k --accept "kld:manual-es<=0.05, tasks>=-2pt"
        [--reference Q8_0] [--rungs A,B] [--start Q4_K_M] [--alpha 0.025] [--kv f16] [--strategy auto]
        [--min-tps 20] [--parallel 1]
        [--configfile FILE] [--directory DIR] [--cores N] [--dry-run] [--json]
        (the walk down one family's ladder, run by Snakemake: the options are the config's `find:` keys)
    quantladder find --unlock [--configfile FILE] [--directory DIR]
        (the lock a killed walk's Snakemake left in DIR removed, as `snakemake --unlock` does)
    quantladder schema

Exit status: 0 answered, 1 error in the request or the data, 2 infeasible (the message says why).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from . import schemas
from .errors import QuantladderError


def _split(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [t.strip() for t in text.split(",") if t.strip()]


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="points.parquet of one card")
    p.add_argument("--ctx", required=True, help="context length actually used, in tokens (32768 or 32k)")
    p.add_argument("--kv", help="allowed KV-cache types, comma-separated (default: any measured)")
    p.add_argument("--min-tps", "--min-tg", dest="min_tg", type=float, default=None,
                   help="speed floor: generation tokens/s of one sequence, at --ctx and --parallel, as measured "
                        "(the speed measure's tgN; docs/recommend.md)")
    p.add_argument("--parallel", type=int, default=1,
                   help="sequences generated at a time (concurrency) the speed floor is for (default 1)")
    p.add_argument("--weight", action="append", default=[], metavar="BENCH[:METRIC]=W",
                   help="task weight (repeatable); default: equal weights over the task benchmarks")
    p.add_argument("--card", help="card key when the dataset holds several")
    p.add_argument("--tolerance", action="append", default=[], metavar="METRIC=T",
                   help="loss a rung may be shown within to rank with its reference, in the metric's unit "
                        "(repeatable; default 1 point of a %%, 0.01 nats of KLD; docs/statistics.md)")
    p.add_argument("--cautious", action="store_true",
                   help="rank a figure not shown within the tolerance by its interval's lower bound")
    p.add_argument("--corpus", help="perplexity corpora whose KLD ranks rungs the task scores cannot separate, "
                                    "comma-separated (default: every one measured)")
    p.add_argument("--accept", action="append", default=[], metavar="THINKING",
                   help="thinking losses accepted, comma-separated (think_close>=-2pt, think_cap<=2pt, "
                        "think_tokens<=1.25x; docs/thinking.md): a thinking family's point not shown within one is "
                        "excluded")
    p.add_argument("--json", action="store_true", help="print the answer as JSON")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="quantladder", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recommend", help="best (family, rung, KV type) for a memory budget and a context")
    r.add_argument("--mem", required=True, help="memory budget: 24GiB, 16000MiB, 24GB (decimal) or bytes")
    _common(r)
    r.add_argument("--runners-up", type=int, default=3)
    k = sub.add_parser("pack", help="place several families onto a set of cards (assignment ILP)")
    k.add_argument("--cards", required=True, help="NAME=SIZE,... e.g. L4=24GiB,L4b=24GiB")
    k.add_argument("--families", help="families to place, comma-separated (default: all)")
    k.add_argument("--require-all", action="store_true", help="every family must be placed (else infeasible)")
    _common(k)
    rep = sub.add_parser("report", help="the HTML report: of the points finished so far (no arguments), "
                         "or of a points.parquet")
    rep.add_argument("dataset", nargs="?", help="a points.parquet (default: the finished points of the config)")
    rep.add_argument("out_html", nargs="?")
    rep.add_argument("--card", help="card to report (default: every card in the dataset; the config's card "
                     "for a partial report)")
    rep.add_argument("--configfile", action="append", default=[], metavar="FILE",
                     help="a config laid over config/config.yaml, as Snakemake's --configfile (repeatable)")
    rep.add_argument("--directory", default=".", help="the run's working directory (where results/ is)")
    sub.add_parser("schema", help="print the dataset's documented schema (Markdown)")
    fd = sub.add_parser("find", help="walk one family's ladder down to the smallest rung shown to lose no more "
                        "than accepted (docs/find.md); each option sets the config's find.<key>")
    fd.add_argument("--family", help="the family whose ladder is walked (required)")
    fd.add_argument("--mem", help="memory budget: 8GiB, 16000MiB, 24GB (decimal) or bytes (required)")
    fd.add_argument("--ctx", help="context actually used, tokens (16384 or 16k) (required)")
    fd.add_argument("--accept", action="append", metavar="FIGURES",
                    help="losses accepted, comma-separated: BENCH[:METRIC]>=-2pt, kld:CORPUS<=NATS, "
                         "ppl_ratio:CORPUS<=RATIO, think_close>=-2pt, think_cap<=2pt, think_tokens<=1.25x "
                         "(repeatable; required)")
    find = schemas.load(schemas.SCHEMA_PATH)["definitions"]["find"]["properties"]  # the defaults' one home
    fd.add_argument("--reference", help=f"the task figures' reference rung (default {find['reference']['default']})")
    fd.add_argument("--min-tps", type=float, help="speed floor: generation tokens/s of one sequence at --ctx, as each "
                    "candidate's speed point measured it (every candidate gets one)")
    fd.add_argument("--parallel", type=int, help="sequences generated at a time the speed floor is for "
                    f"(default {find['parallel']['default']})")
    fd.add_argument("--rungs", help="candidate rungs, comma-separated (default: the family's ladder)")
    fd.add_argument("--start", help=f"where the walk starts (default {find['start']['default']}, or the nearest "
                    "candidate)")
    fd.add_argument("--alpha", type=float, help=f"one-sided level over the whole walk (default {find['alpha']['default']})")
    fd.add_argument("--strategy", choices=find["strategy"]["enum"],
                    help=f"step from the start, or bisect the ladder (default {find['strategy']['default']}: "
                         "bisect from 8 fitting candidates)")
    fd.add_argument("--kv", help="KV-cache type (default: the family's first)")
    fd.add_argument("--configfile", action="append", default=[], metavar="FILE",
                    help="a config laid over config/config.yaml, as Snakemake's --configfile (repeatable)")
    fd.add_argument("--directory", default=".", help="the run's working directory (where results/ is)")
    fd.add_argument("--cores", default="all", help="Snakemake's --cores (default all)")
    fd.add_argument("--dry-run", action="store_true", help="print what the walk's first steps would run")
    fd.add_argument("--json", action="store_true", help="print the answer as JSON")
    fd.add_argument("--unlock", action="store_true",
                    help="remove the lock a killed walk (kill -9, a lost node) left in --directory, as Snakemake's "
                         "--unlock does, and run nothing; only when no Snakemake runs there")
    df_ = sub.add_parser("diff", help="compare two datasets figure by figure (exit 1 when a figure differs): did a "
                         "change of code, build or config move any figure")
    df_.add_argument("old", help="a points.parquet, or the results/<card> folder holding one")
    df_.add_argument("new", help="the dataset to compare with it")
    df_.add_argument("--rtol", type=float, default=0.0,
                     help="relative tolerance (default 0: the same card and config give byte-identical figures)")
    df_.add_argument("--shared", action="store_true",
                     help="compare only the rows both hold (rows of one alone are listed, not a difference)")
    df_.add_argument("--json", action="store_true", help="print the comparison as JSON")
    pl = sub.add_parser("plan", help="items needed to detect a loss, and what a plan costs in job-hours")
    pl.add_argument("--detect", required=True, type=float, help="loss to detect, in percentage points (e.g. 2)")
    pl.add_argument("--dataset", required=True, help="points.parquet of one card")
    pl.add_argument("--power", type=float, default=0.8, help="power to detect it with (default 0.8)")
    pl.add_argument("--alpha", type=float, default=0.05, help="two-sided level before the ladder's correction")
    pl.add_argument("--config", help="config whose points x benchmarks to price (default: the dataset's points)")
    pl.add_argument("--comparisons", type=int, help="comparisons the correction divides alpha by "
                    "(default: the family's rung x benchmark comparisons on the card)")
    pl.add_argument("--card", help="card key when the dataset holds several")
    pl.add_argument("--json", action="store_true", help="print the answer as JSON")
    return ap


def _find_unlock(args) -> int:
    """`quantladder find --unlock`: Snakemake's --unlock in the walk's directory, with the files the walk
    was given (Snakemake parses the workflow to unlock, and asks for --cores to do so)."""
    from .scriptutil import SNAKEFILE

    files = [str(Path(f).resolve()) for f in args.configfile]
    cmd = [str(Path(sys.executable).with_name("snakemake")), "--unlock", "--cores", "1", "--snakefile",
           str(SNAKEFILE), "--directory", str(args.directory), *(["--configfile", *files] if files else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SNAKEFILE.parent / "workflow"),
                                                        os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    return subprocess.run(cmd, env=env).returncode


def _lock_hint(args) -> str | None:
    """What to do when the walk's Snakemake stopped at a lock (its own message advises an --unlock
    argument, which is this command's): None when the directory holds no lock (Snakemake's file
    locks, .snakemake/locks/; a run that fails otherwise removes its own)."""
    locks = Path(args.directory) / ".snakemake" / "locks"
    if not (locks.is_dir() and any(locks.iterdir())):
        return None
    again = " ".join(["quantladder find --unlock", *(f"--configfile {f}" for f in args.configfile),
                      *([f"--directory {args.directory}"] if str(args.directory) != "." else [])])
    return (f"quantladder find: {Path(args.directory).resolve()} is locked: a Snakemake runs there, or one was "
            f"killed (kill -9, a lost node) and left its lock. When none runs, remove it with `{again}` "
            "(or `snakemake --unlock --cores 1` in that directory), then run the same find command again.")


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if args.cmd == "find" and not args.unlock:
        missing = [f"--{k}" for k in ("family", "mem", "ctx", "accept") if not getattr(args, k)]
        if missing:
            ap.error(f"find: the following arguments are required: {', '.join(missing)}")
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.cmd == "schema":
            from .dataset import schema_markdown

            print(schema_markdown())
            return 0
        if args.cmd == "report":
            if args.dataset:
                if not args.out_html:
                    raise QuantladderError("report: a dataset needs the output path too (DATASET OUT_HTML)")
                from .report import build

                print(f"wrote {build(args.dataset, args.out_html, card=args.card)}")
                return 0
            from . import card as qcard
            from . import config as qconfig
            from . import progress

            cfg = qconfig.load_config(args.configfile)
            card = args.card or qcard.label(cfg.get("card"))
            parquet, html, pend = progress.partial_report(cfg, card, args.directory)
            print(progress.summary_text(pend))
            print(f"wrote {parquet}\nwrote {html}")
            return 0
        if args.cmd == "find":
            from . import find as qfind

            if args.unlock:
                return _find_unlock(args)
            rc = qfind.run_cli(args)
            hint = _lock_hint(args) if rc and not args.dry_run else None
            if hint:
                print(hint, file=sys.stderr)
            return rc
        if args.cmd == "diff":
            from . import dataset_diff

            result = dataset_diff.compare(args.old, args.new, rtol=args.rtol)
            print(json.dumps(result, indent=2, default=str) if args.json else dataset_diff.format_text(result))
            return 0 if dataset_diff.equal(result, shared_only=args.shared) else 1
        if args.cmd == "plan":
            from . import plan as qplan

            result = qplan.load_and_plan(args.dataset, detect=args.detect, power=args.power, alpha=args.alpha,
                                         card=args.card, config_path=args.config, comparisons=args.comparisons)
            print(json.dumps(result, indent=2, default=str) if args.json else qplan.format_text(result).rstrip())
            return 0
        from . import dataset_view as dv
        from . import recommend as rec

        df = dv.load(args.dataset)
        weights = rec.parse_weights(args.weight)
        rank = {"tolerance": rec.parse_tolerance(args.tolerance), "cautious": args.cautious,
                "corpora": _split(args.corpus), "parallel": args.parallel, "accept": args.accept or None}
        if args.cmd == "recommend":
            result = rec.recommend(df, args.mem, args.ctx, kv=_split(args.kv), min_tg=args.min_tg,
                                   weights=weights, card=args.card, n_runners_up=args.runners_up, **rank)
        else:
            result = rec.pack(df, rec.parse_cards(args.cards), args.ctx, families=_split(args.families),
                              kv=_split(args.kv), min_tg=args.min_tg, weights=weights,
                              require_all=args.require_all, card=args.card, **rank)
        print(json.dumps(result, indent=2, default=str) if args.json else rec.format_text(result))
        return 0 if result["feasible"] else 2
    except QuantladderError as e:
        print(f"quantladder {args.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
