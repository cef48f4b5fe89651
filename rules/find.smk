# Find my rung (docs/find.md): the ladder walked down from Q4_K_M for one family, measuring only the
# rungs the walk visits, each as an ordinary point (a later full run reuses it). Each step is a
# checkpoint: its output says which rung to measure next, so the DAG grows one rung at a time.
#
#   snakemake results/<card>/find/<family>.json        (the config's `find:` section)
#   quantladder find --family F --mem 8GiB --ctx 16k --accept "kld:manual-es<=0.05"


checkpoint find_step:
    input:
        get_find_step_inputs,
    output:
        "results/{card}/find/{family}/step{k}.json",
    log:
        "logs/find_step/{card}/{family}/step{k}.log",
    wildcard_constraints:
        k=r"\d+",
    localrule: True
    conda:
        "../envs/quantladder.yaml"
    params:
        spec=get_find_key,
    script:
        "../scripts/find_step.py"


rule find:
    input:
        steps=get_find_steps,
    output:
        report(
            "results/{card}/find/{family}.json",
            caption="../workflow/quantladder/captions/find.rst",
            category="Find my rung",
        ),
    log:
        "logs/find/{card}/{family}.log",
    localrule: True
    conda:
        "../envs/quantladder.yaml"
    params:
        spec=get_find_key,
    script:
        "../scripts/find.py"
