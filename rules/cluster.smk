# Cluster placement that belongs to the workflow, not to a site (sites edit profiles/slurm/site.yaml).
# Included by the Snakefile; harmless on one machine, where every rule is local anyway.
#
# Downloads (models, corpora, the BFCL wheel) run on the submitting host: compute nodes often have no route to the hub, and a
# download is I/O, not compute. The aggregates (aggregate, curves, report) are declared local in
# rules/aggregate.smk; recommend reads one Parquet file. Names of rules a config does not use cost
# nothing here.


localrules:
    acquire_source,
    acquire_prebuilt,
    bfcl_data,
    corpus,
    recommend,
