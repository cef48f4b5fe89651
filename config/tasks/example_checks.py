"""Python checks of config/tasks/example.jsonl. A check runs only in the sandbox, with the standard
library only; it gets the reply (text) and the item (as written in the task file) and passes by
returning True."""

import re


def three_primes_below_20(reply, item):
    numbers = [int(x) for x in re.findall(r"\d+", reply)]
    primes = {2, 3, 5, 7, 11, 13, 17, 19}
    return len(set(numbers)) >= 3 and all(n in primes for n in numbers)
