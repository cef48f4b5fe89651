# Model files: source -> reference rung -> importance matrices -> quantized rungs (and prebuilt
# third-party rungs).


rule acquire_source:
    output:
        gguf="resources/models/{family}/source/source.gguf",
        info="resources/models/{family}/source/source.gguf.json",
    log:
        "logs/acquire_source/{family}.log",
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=1024,
        runtime=runtime_for("acquire_source", 120),
    params:
        source=get_source_spec,
    script:
        "../scripts/acquire.py"


rule acquire_prebuilt:
    input:
        # the header it is checked against (quantladder.provenance, docs/ladder.md "Third-party files")
        reference=get_reference_gguf,
        reference_info=lambda w: get_reference_gguf(w) + ".json",
        # a stand-in derived here: the made rung it copies (families.<f>.prebuilt.<r>.derive)
        derived=get_prebuilt_derived,
    output:
        gguf="resources/models/{family}/prebuilt/{rung}.gguf",
        info="resources/models/{family}/prebuilt/{rung}.gguf.json",
    log:
        "logs/acquire_prebuilt/{family}/{rung}.log",
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=1024,
        runtime=runtime_for("acquire_prebuilt", 120),
    params:
        source=get_prebuilt_spec,
    script:
        "../scripts/acquire.py"


rule reference_rung:
    input:
        gguf="resources/models/{family}/source/source.gguf",
        info="resources/models/{family}/source/source.gguf.json",
    output:
        gguf="resources/models/{family}/reference/{rung}.gguf",
        info="resources/models/{family}/reference/{rung}.gguf.json",
    log:
        "logs/reference_rung/{family}/{rung}.log",
    benchmark:
        "logs/benchmarks/reference_rung/{family}/{rung}.tsv"
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=qres.mem_mb("dequantize"),
        runtime=qres.runtime_min("dequantize", config, rule="reference_rung"),
    script:
        "../scripts/reference.py"


rule imatrix:
    input:
        gguf=get_reference_gguf,
        info=get_reference_info,
        corpus="resources/corpora/{corpus}.txt",
        tools=get_llama_tools,
    output:
        imatrix="resources/models/{family}/imatrix/{corpus}-{settings}.gguf",
        info="resources/models/{family}/imatrix/{corpus}-{settings}.gguf.json",
    log:
        "logs/imatrix/{family}/{corpus}-{settings}.log",
    benchmark:
        "logs/benchmarks/imatrix/{family}/{corpus}-{settings}.tsv"
    wildcard_constraints:
        settings=r"n\d+-c\d+(-out)?(-sp)?",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        gpu=qres.gpus("imatrix"),
        mem_mb=qres.mem_mb("inference", n_ctx=2048),
        runtime=runtime_for("imatrix", 60),
    params:
        settings=get_imatrix_settings,
        spec=get_imatrix_spec,
    script:
        "../scripts/imatrix.py"


rule quantize:
    input:
        gguf=get_reference_gguf,
        imatrix=get_imatrix,
    output:
        gguf="resources/models/{family}/quantized/{rung}.gguf",
        info="resources/models/{family}/quantized/{rung}.gguf.json",
    log:
        "logs/quantize/{family}/{rung}.log",
    benchmark:
        "logs/benchmarks/quantize/{family}/{rung}.tsv"
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=qres.mem_mb("quantize"),
        runtime=qres.runtime_min("quantize", config),
    params:
        options=get_quantize_options,
        binary=config["quantize"].get("binary"),
    script:
        "../scripts/quantize.py"


rule corpus:
    output:
        text="resources/corpora/{corpus}.txt",
        info="resources/corpora/{corpus}.json",
    log:
        "logs/corpus/{corpus}.log",
    conda:
        "../envs/quantladder.yaml"
    resources:
        mem_mb=1024,
        runtime=30,
    params:
        source=get_corpus_spec,
    script:
        "../scripts/corpus.py"
