"""The figures of a pass, as llama-perplexity prints them (with their uncertainties), and its
dataset rows (units and directions are the metric registry's)."""

from __future__ import annotations

import math

import numpy as np

from ... import metrics
from ...corpora import ngram_overlap
from ...errors import DataError
from ...stats.tokens import ppl_ratio, token_delta, token_mean, token_share

PERCENTILES = [("max", 1.0), ("p99_9", 0.999), ("p99", 0.99), ("p95", 0.95), ("p90", 0.90),
               ("median", 0.5), ("p10", 0.10), ("p5", 0.05), ("p1", 0.01), ("p0_1", 0.001), ("min", 0.0)]


def _mean_err(x: np.ndarray) -> tuple[float, float]:
    n = len(x)
    mean = float(x.mean())
    err = float(math.sqrt(max(float((x * x).mean()) - mean * mean, 0.0) / (n - 1))) if n > 1 else float("nan")
    return mean, err


def summarize(res: dict) -> dict:
    """The figures llama-perplexity prints, with their uncertainties (its ± treats tokens as independent:
    kept for parity), and under ``clustered`` the paired figures' chunk-level intervals, the ones the
    dataset's rows and verdicts carry (stats.tokens; a pass from before ``chunk_rows`` was recorded has
    none)."""
    nll = res["nll"]
    n = len(nll)
    mean_nll, err_nll = _mean_err(nll)
    ppl = math.exp(mean_nll)
    s = {"n_tokens": n, "n_chunks": res["n_chunks"], "ppl": ppl, "ppl_err": ppl * err_nll,
         "mean_nll": mean_nll, "mean_nll_err": err_nll}
    if "kld" not in res:
        return s
    nb = res["nll_base"]
    mean_b, err_b = _mean_err(nb)
    ppl_b = math.exp(mean_b)
    d = nb - nll  # ln(PPL(Q)/PPL(base)) per token is nll - nll_base
    mean_d, err_d = _mean_err(-d)
    cov = float(np.mean((nll - mean_nll) * (nb - mean_b)))
    var_q, var_b = float(nll.var()), float(nb.var())
    cor = cov / math.sqrt(var_q * var_b) if var_q > 0 and var_b > 0 else float("nan")
    diff_err = math.sqrt(max(ppl**2 * err_nll**2 + ppl_b**2 * err_b**2
                             - 2 * ppl * ppl_b * cov / (n - 1), 0.0))
    kld = res["kld"]
    kld_mean, kld_err = _mean_err(kld)
    dp = res["dp"]
    dp_mean, dp_err = _mean_err(dp)
    rms = math.sqrt(float((dp * dp).mean()))
    rms_err = float(np.sqrt(((dp * dp) ** 2).mean() - (dp * dp).mean() ** 2) / math.sqrt(n - 1)) / (2 * rms) if rms > 0 else 0.0
    same = float(res["same_top"].mean())
    s.update({
        "ppl_base": ppl_b, "ppl_base_err": ppl_b * err_b, "cor_ln_ppl": cor,
        "ln_ppl_ratio": mean_d, "ln_ppl_ratio_err": err_d,
        "ppl_ratio": math.exp(mean_d), "ppl_ratio_err": math.exp(mean_d) * err_d,
        "ppl_diff": ppl - ppl_b, "ppl_diff_err": diff_err,
        "kld_mean": kld_mean, "kld_mean_err": kld_err,
        "dp_mean": dp_mean, "dp_mean_err": dp_err, "dp_rms": rms, "dp_rms_err": rms_err,
        "same_top": same, "same_top_err": math.sqrt(same * (1 - same) / (n - 1)) if n > 1 else float("nan"),
    })
    for name, q in PERCENTILES:
        s[f"kld_{name}"] = float(np.quantile(kld, q))
        s[f"dp_{name}"] = float(np.quantile(dp, q))
    if res.get("chunk_rows"):
        labels = np.repeat(np.arange(len(res["chunk_rows"])), res["chunk_rows"])
        ln = token_delta(nll, nb, labels)
        r = ppl_ratio(ln)  # the ratio's interval is the log-ratio's through exp (not a figure of its own)
        ratio = {"estimate": r["ppl_ratio"], "stderr": r["ppl_ratio"] * ln.stderr, "ci_low": r["ci_low"],
                 "ci_high": r["ci_high"], "level": r["level"], "n_chunks": ln.n_chunks, "method": "exp of ln_ppl_ratio's"}
        s["clustered"] = {"ln_ppl_ratio": ln.to_dict(), "ppl_ratio": ratio,
                          "kld_mean": token_mean(kld, labels, positive=True).to_dict(),
                          "same_top_token": token_share(res["same_top"], labels).to_dict()}
    return s


def metric_rows(summary: dict, n_ctx: int, subset: str | None = None) -> list[dict]:
    """Dataset rows for a summary (units: PPL and ratios are pure numbers, KLD in nats, Δp in %);
    ``subset`` is the corpus (``<domain>-<language>[.<part>]``, quantladder.corpora)."""
    n = summary["n_tokens"]
    rows = [metrics.row("ppl", summary["ppl"], stderr=summary["ppl_err"], n=n, n_ctx=n_ctx, subset=subset)]
    if "kld_mean" not in summary:
        return rows
    R = lambda *a, **k: rows.append(metrics.row(*a, n=n, n_ctx=n_ctx, subset=subset, **k))  # noqa: E731
    clustered = summary.get("clustered") or {}

    def paired(metric: str, value: float, naive_err: float) -> None:
        """A paired figure: its ± and interval clustered by chunk (one chunk: none); llama-perplexity's
        per-token ± only for a summary from before the chunks were recorded."""
        c = clustered.get(metric)
        if c is None:
            R(metric, value, stderr=naive_err)
            return
        R(metric, value, stderr=c["stderr"] if math.isfinite(c["stderr"]) else None, interval=c)

    R("ppl_base", summary["ppl_base"], stderr=summary["ppl_base_err"])
    paired("ppl_ratio", summary["ppl_ratio"], summary["ppl_ratio_err"])
    paired("ln_ppl_ratio", summary["ln_ppl_ratio"], summary["ln_ppl_ratio_err"])
    R("ppl_diff", summary["ppl_diff"], stderr=summary["ppl_diff_err"])
    R("cor_ln_ppl", summary["cor_ln_ppl"])
    paired("kld_mean", summary["kld_mean"], summary["kld_mean_err"])
    for name, _ in PERCENTILES:
        R(f"kld_{name}", summary[f"kld_{name}"])
    R("delta_p_mean", 100 * summary["dp_mean"], stderr=100 * summary["dp_mean_err"])
    R("delta_p_rms", 100 * summary["dp_rms"], stderr=100 * summary["dp_rms_err"])
    for name, _ in PERCENTILES:
        R(f"delta_p_{name}", 100 * summary[f"dp_{name}"])
    paired("same_top_token", 100 * summary["same_top"], 100 * summary["same_top_err"])
    return rows


def overlap_rows(eval_tokens: np.ndarray, calibrations: list[dict], *, corpus: str, n_ctx: int, ngram: int,
                 flag_pct: float) -> tuple[list[dict], list[dict]]:
    """Rows for the share of this pass's evaluation n-grams found in the rung's calibration text,
    and the flag (1 when the share reaches flag_pct); plus a record per calibration corpus.

    ``calibrations``: [{"corpus": name, "tokens": array} or {"corpus": None, "reason": why unknown}].
    """
    if not calibrations:
        return [], []
    records, shares, n_eval = [], [], 0
    for cal in calibrations:
        if cal.get("tokens") is None:
            rec = {"corpus": cal.get("corpus"), "reason": cal["reason"]}
            records.append(rec)
            return [metrics.row("calibration_overlap", None, subset=corpus, n_ctx=n_ctx, status="absent",
                                status_reason=cal["reason"])], records
        share, n_eval, shared = ngram_overlap(eval_tokens, cal["tokens"], ngram)
        if n_eval == 0:
            raise DataError(f"corpus {corpus}: fewer than {ngram} evaluation tokens, no n-gram to compare")
        records.append({"corpus": cal["corpus"], "ngram": ngram, "shared_ngrams": shared, "eval_ngrams": n_eval,
                        "calibration_tokens": int(len(cal["tokens"])), "share_pct": 100 * share})
        shares.append(share)
    pct = 100 * max(shares)
    flagged = pct >= flag_pct
    rows = [metrics.row("calibration_overlap", pct, n=n_eval, subset=corpus, n_ctx=n_ctx),
            metrics.row("calibration_overlap_flag", 1.0 if flagged else 0.0, n=n_eval, subset=corpus, n_ctx=n_ctx)]
    return rows, records

