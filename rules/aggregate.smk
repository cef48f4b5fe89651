# Aggregates: the Parquet dataset, one curve file per family, the HTML report.
# They read the points' metrics files only: rebuilding them never recomputes a point
# (`snakemake --forcerun aggregate report` rebuilds both from what is measured).


localrules:
    aggregate,
    curves,
    report,


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
