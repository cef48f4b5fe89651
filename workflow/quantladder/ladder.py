"""The ladder a config describes: what each made rung is (type, tensor-type recipe, importance matrix).

A family's ``rungs:`` names rungs. A name is a file type (``Q4_K_M``, ``IQ2_XXS``, ...), a
built-in FP4 rung (``NVFP4``, ``MXFP4``), a recipe of ``quantize.recipes``, or any name whose
``rung_options`` entry says what it is (``type:`` and/or ``recipe:``) — so "Q4_K_M with and
without a matrix" are two rungs of one ladder:

    rungs: [Q4_K_M, Q4_K_M-imat]
    rung_options: {Q4_K_M-imat: {type: Q4_K_M, imatrix: calibration}}

A rung's matrix is ``imatrix: <corpus>`` (computed in the DAG from the reference rung over that
corpus of ``corpora:``, with ``quantize.imatrix_settings``), ``imatrix: none``, or ``imatrix: auto``
(the default, ``quantize.imatrix``): the calibration corpus ``quantize.calibration`` for the IQ
types and the types that need a matrix, none for the rest. ``imatrix_file: <path>`` names a
matrix made elsewhere.

``plan`` resolves all of it into one dict; ``config.rung_options`` returns it, so the whole
recipe, the matrix's corpus (with its source) and settings enter every point's spec hash, and
the quantize rule gets exactly what the manifest records.
"""

from __future__ import annotations

from . import HARNESS_VERSION
from .errors import ConfigError
from .imatrix import file_name, resolve_settings
from .io import hash_obj
from .llama_tools import library_backend, library_version
from .models import BUILTIN_RECIPES, FTYPES, NEEDS_IMATRIX, resolve_recipe

IMATRIX_DIR = "resources/models/{family}/imatrix"


def rung_name(entry: str) -> str:
    """The rung's canonical name: a file-type name in upper case (``q4_k_m`` = ``Q4_K_M``), any
    other name as written."""
    up = str(entry).upper()
    return up if up in FTYPES or up in BUILTIN_RECIPES else str(entry)


def imatrix_settings(cfg: dict) -> dict:
    return resolve_settings((cfg.get("quantize") or {}).get("imatrix_settings"))


def imatrix_path(cfg: dict, family: str, corpus: str) -> str:
    return f"{IMATRIX_DIR.format(family=family)}/{file_name(corpus, imatrix_settings(cfg))}"


def imatrix_key(cfg: dict, family: str, corpus: str) -> str:
    """The hash of what decides a computed matrix (a params value of rule imatrix): the corpus
    source, the settings, the family's reference, and the llama.cpp build that computes it."""
    fam = cfg["families"][family]
    if corpus not in (cfg.get("corpora") or {}):
        raise ConfigError(f"imatrix of {family}: {corpus!r} is not a corpus of `corpora:`")
    return hash_obj({"corpus": corpus, "source": cfg["corpora"][corpus], "settings": imatrix_settings(cfg),
                     "family_source": fam["source"], "family_sha256": fam.get("sha256"),
                     "reference": fam["reference"], "gpu_layers": cfg["gpu_layers"],
                     "llama_cpp_python": library_version(), "backend": library_backend(),
                     "harness": HARNESS_VERSION})[:16]


def plan(cfg: dict, family: str, rung: str, where: str = "config") -> dict:
    """Everything that decides a made rung's file (raises ConfigError naming the key at fault)."""
    q = dict(cfg.get("quantize") or {})
    fam = cfg["families"][family]
    opts = dict((fam.get("rung_options") or {}).get(rung) or {})
    key = f"{where}: families.{family}.rung_options.{rung}"
    recipes = q.get("recipes") or {}
    recipe_name = opts.pop("recipe", None)
    if recipe_name is None and rung in recipes:
        recipe_name = rung
    if recipe_name is not None and recipe_name not in recipes:
        raise ConfigError(f"{key}.recipe: no recipe {recipe_name!r} under quantize.recipes (known: {sorted(recipes)})")
    rtype = opts.pop("type", None)
    try:
        if recipe_name is not None:
            recipe = dict(recipes[recipe_name])
            if rtype:
                recipe["type"] = rtype
            resolved = resolve_recipe(recipe_name, recipe)
        else:
            resolved = resolve_recipe(rtype or rung)
    except ConfigError as e:
        raise ConfigError(f"{where}: families.{family}.rungs: {rung}: {e}") from e
    for k in ("output_tensor_type", "token_embedding_type"):  # per-rung options win over the recipe's
        v = opts.pop(k, None) or q.get(k)
        if v:
            resolved[k] = str(v).upper()
    out = {**resolved, "recipe": recipe_name,
           "allow_requantize": bool(opts.pop("allow_requantize", q["allow_requantize"]))}
    imatrix_file = opts.pop("imatrix_file", None)
    choice = opts.pop("imatrix", None)
    if opts:
        raise ConfigError(f"{key}: unknown keys {sorted(opts)}")
    if choice is None:
        # quantize.imatrix (default auto) may be written null (or empty), which has always read as auto;
        # kept so: not a second default, the meaning of null
        choice = q["imatrix"] or "auto"
    if imatrix_file:
        if choice not in ("auto", "none"):
            raise ConfigError(f"{key}: give either imatrix (a corpus) or imatrix_file, not both")
        out["imatrix"] = {"file": str(imatrix_file)}
        return out
    if choice == "auto":
        wants = resolved["type"].startswith("IQ") or resolved["type"] in NEEDS_IMATRIX
        # quantize.calibration's default is null, no corpus named: the rung then gets no matrix (none)
        choice = (q["calibration"] or "none") if wants else "none"
    if choice == "none":
        if resolved["type"] in NEEDS_IMATRIX:
            raise ConfigError(f"{key}: {resolved['type']} needs an importance matrix: set imatrix to a calibration "
                              "corpus (or quantize.calibration for imatrix: auto)")
        out["imatrix"] = None
        return out
    corpora = cfg.get("corpora") or {}
    if choice not in corpora:
        raise ConfigError(f"{key}.imatrix: {choice!r} is not a corpus of `corpora:` (known: {sorted(corpora)}); "
                          "use none, auto or a corpus name")
    out["imatrix"] = {"corpus": choice, "source": corpora[choice], "settings": imatrix_settings(cfg),
                      "file": imatrix_path(cfg, family, choice),
                      "reference": fam["reference"]}
    return out
