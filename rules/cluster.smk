# Cluster placement that belongs to the workflow, not to a site (a site edits
# profiles/slurm/site.yaml). Harmless on one machine, where every rule is local anyway.
#
# Downloads (models, corpora, the BFCL wheel) run on the submitting host: compute nodes often
# have no route to the hub, and a download is I/O, not compute. The aggregates (aggregate,
# curves, report) are declared local in rules/aggregate.smk; recommend reads one Parquet file.
# A rule named here that a config does not use costs nothing.


localrules:
    acquire_source,
    acquire_prebuilt,
    benchmark_source,
    llama_tools,
    corpus,
    recommend,
