# llama.cpp's own tools (llama-imatrix, llama-quantize, llama-perplexity, llama-bench), built once
# per llama-cpp-python version and backend from the llama.cpp source that version vendors. The
# build lives in a cache outside results/ (tools.cache_dir); the record here names its binaries
# and their sha256, and every point a tool touches carries that record in its manifest.


rule llama_tools:
    output:
        "resources/llama-tools/{version}-{backend}.json",
    log:
        "logs/llama_tools/{version}-{backend}.log",
    benchmark:
        "logs/benchmarks/llama_tools/{version}-{backend}.tsv"
    wildcard_constraints:
        version=r"[0-9][0-9A-Za-z.+]*",
        backend=r"[a-z]+",
    conda:
        "../envs/quantladder.yaml"
    threads: workflow.cores
    resources:
        mem_mb=4096,
        runtime=runtime_for("llama_tools", 90),
    params:
        cache_dir=config["tools"].get("cache_dir"),
        cmake_args=config["tools"].get("cmake_args", []),
    script:
        "../scripts/llama_tools.py"
