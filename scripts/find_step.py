"""Checkpoint find_step: one step of the walk down a family's ladder (docs/find.md).

Step 0 orders the candidates by their measured bits per weight, keeps those whose weights and KV
cache fit the budget at the stated context (and, with a speed floor, whose measured generation speed
reaches it), and names the start rung. Step k reads step k−1, decides
the rung it asked for from that rung's points, and names the next rung to measure, or says done.
"""

from quantladder import find as qfind
from quantladder.io import read_json, write_json
from quantladder.scriptutil import main, mock_from_argv


def run(smk):
    w = smk.wildcards
    sp = qfind.spec(smk.config)
    if int(w.k) == 0:
        infos, speeds, sources = qfind.inputs(sp, smk.config, w.card)
        state = qfind.start(sp, qfind.candidates(sp, infos, speeds, sources))
    else:
        prev = read_json(smk.input[0])
        rung = prev["next"]
        ev = qfind.evidence(sp, smk.config, w.card, rung, qfind.level_of(prev, rung))
        state = qfind.advance(prev, ev)
        qfind.log.info("%s at one-sided %.4g: %s", rung, ev["alpha"], ev["verdict"])
    qfind.log.info("next: %s", state["next"] or "done")
    write_json(smk.output[0], state)


if __name__ == "__main__":
    main(run, globals().get("snakemake") or mock_from_argv())
