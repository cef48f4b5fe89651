# Aggregates: the Parquet dataset, one curve file per family, the HTML report.
# They read what the points wrote (metrics files, and the task points' verdicts and generations
# for the flips and identical replies): rebuilding them never recomputes a point
# (`snakemake --forcerun aggregate report` rebuilds both from what is measured).


localrules:
    aggregate,
    curves,
    report,
    partial_report,


rule aggregate:
    input:
        metrics=get_point_metrics,
        per_item=get_point_items,
    output:
        "results/{card}/points.parquet",
    log:
        "logs/aggregate/{card}.log",
    conda:
        "../envs/quantladder.yaml"
    script:
        "../scripts/aggregate.py"


rule curves:
    input:
        metrics=get_family_metrics,
        per_item=get_family_items,
    output:
        "results/{card}/curves/{family}.parquet",
    log:
        "logs/curves/{card}/{family}.log",
    conda:
        "../envs/quantladder.yaml"
    script:
        "../scripts/aggregate.py"


rule report:
    input:
        "results/{card}/points.parquet",
        finds=get_find_answers,
    output:
        report(
            "results/{card}/report.html",
            caption="../workflow/quantladder/captions/report.rst",
            category="Report",
        ),
    log:
        "logs/report/{card}.log",
    conda:
        "../envs/quantladder.yaml"
    script:
        "../scripts/report.py"


# The report of whatever is finished now, with what is left per rule and its estimated minutes
# (quantladder.progress). It has no inputs, so it never waits for a point: its params name the
# finished metrics files, and each newly finished one makes it stale. While another Snakemake runs
# in this directory (it holds the lock), `quantladder report` builds the same files.
rule partial_report:
    output:
        dataset="results/{card}/partial/points.parquet",
        html="results/{card}/partial/report.html",
    log:
        "logs/partial_report/{card}.log",
    conda:
        "../envs/quantladder.yaml"
    params:
        finished=get_finished_key,
    script:
        "../scripts/partial_report.py"
