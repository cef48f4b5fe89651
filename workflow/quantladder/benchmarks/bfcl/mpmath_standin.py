"""Stand-in for ``mpmath`` inside the sandbox, used only when the sandbox's interpreter lacks it.

BFCL's math backend uses mpmath for one thing: ``mp.dps`` and ``log`` in ``logarithm``. This gives the
same call shape with ``decimal`` at the requested precision; its printed result can differ from
mpmath's in the last digits (point the sandbox at an interpreter with mpmath for exact parity:
``benchmarks.bfcl.sandbox_python``).
"""

import decimal


class _MP:
    dps = 15


mp = _MP()


class mpf(decimal.Decimal):
    def __truediv__(self, other):
        with decimal.localcontext() as c:
            c.prec = mp.dps
            return mpf(decimal.Decimal(self) / decimal.Decimal(other))

    def __repr__(self):
        return f"mpf('{decimal.Decimal(self)}')"


def log(x):
    with decimal.localcontext() as c:
        c.prec = mp.dps + 5
        return mpf(decimal.Decimal(str(x)).ln())
