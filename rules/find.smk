# Find my rung (docs/find.md): the ladder walked down from Q4_K_M for one family, measuring only the
# rungs the walk visits, each as an ordinary point (a later full run reuses it). Each step is a
# checkpoint: its output says which rung to measure next, so the DAG grows one rung at a time.
#
#   snakemake results/<card>/find/<family>.json        (the config's `find:` section)
#   quantladder find --family F --mem 8GiB --ctx 16k --accept "kld:manual-es<=0.05"

_FIND = []


def _find_spec(wildcards):
    """The `find:` section, checked (errors name find.<key>) the first time a find job is planned. The
    package is imported here, not at the top: it pulls in scipy, pandas and pulp, and a DAG build
    without a find target (every Slurm job's re-parse) should not pay for them."""
    import quantladder.find as qfind

    if not _FIND:
        _FIND.append(qfind.spec(config) if config.get("find") else None)
    spec = _FIND[0]
    if spec is None or spec.family != wildcards.family:
        raise ValueError(
            f"results/{wildcards.card}/find/{wildcards.family}.json: the config's `find:` section "
            f"searches {spec.family if spec else 'nothing'} (set find.family: {wildcards.family})"
        )
    return qfind, spec


def get_find_key(wildcards):
    return _find_spec(wildcards)[1].key


def get_find_step_inputs(wildcards):
    """Step 0: every candidate's sidecar (its measured bits per weight and size). Step k: the state
    of step k−1 and the figures' files of every rung visited so far and of the one it asks for.
    """
    (qfind, sp), w = _find_spec(wildcards), wildcards
    k = int(w.k)
    if k == 0:
        return [qfind.sidecar(config, sp.family, r) for r in (*sp.rungs, sp.reference)]
    job = checkpoints.find_step.get(card=w.card, family=w.family, k=str(k - 1))
    prev = job.output[0]
    state = qio.read_json(prev)
    rungs = [v["rung"] for v in state["visited"]] + [state["next"]]
    files = [prev, *qfind.reference_files(sp, config, w.card)]
    for r in rungs:
        files += qfind.figure_files(sp, config, w.card, r)
    return files


def get_find_steps(wildcards):
    """Every step of the walk, up to the one that says it is done."""
    _find_spec(wildcards)
    out, k = [], 0
    while True:
        step = checkpoints.find_step.get(
            card=wildcards.card, family=wildcards.family, k=str(k)
        ).output[0]
        out.append(step)
        if qio.read_json(step)["done"]:
            return out
        k += 1


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
