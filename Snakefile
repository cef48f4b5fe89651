# quantladder: the quantization ladder of open LLMs, point by point, card by card.
# Thin on purpose: config, includes, and the default target. The logic lives in workflow/quantladder.


import os


# The default config sits beside this Snakefile, so `--directory elsewhere` works too;
# `--configfile` (and `--config`) on the command line override it.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "rules/common.smk"
include: "rules/tools.smk"
include: "rules/models.smk"
include: "rules/anchors.smk"
include: "rules/measures.smk"
include: "rules/tasks.smk"
include: "rules/fidelity.smk"
include: "rules/aggregate.smk"
include: "rules/recommend.smk"
include: "rules/find.smk"
include: "rules/cluster.smk"


rule all:
    default_target: True
    input:
        get_final_outputs,
