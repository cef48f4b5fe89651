"""A family section (``families.<f>``) with the config schema's defaults filled in.

The run's config is validated, defaults filled (quantladder.config.validate_config, Snakemake's
validate); code that also meets a partial family (an anchors entry's ``{"chat": ...}``, a benchmark
built outside a run, a test's ``{}``) fills it here instead of writing a default of its own.
A declaration on the ground floor: it reads the schema, nothing else of the package.
"""

from __future__ import annotations

from . import schemas


def family_settings(family: dict | None) -> dict:
    """A copy of ``family`` with the schema's defaults of a ``families.<f>`` entry filled in (``chat``,
    ``enabled``, ``reference``, ...); validation errors (a missing ``source``) are left to validation."""
    # filled as a whole config's would be (the entry's $refs point into the config schema's root)
    return schemas.filled(schemas.SCHEMA_PATH, {"families": {"_": family or {}}})["families"]["_"]
