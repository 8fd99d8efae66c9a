"""Answers `main.step(n)` with n: after the seconds written in `delay` beside it (if any), and
only once no `hold` file is beside it (a test holds the run on a call that way, up to 60 s)."""

import os
import time

from flowrt.toolkit import serve

HERE = os.path.dirname(os.path.abspath(__file__))


def step(n: int) -> int:
    delay_file = os.path.join(HERE, "delay")
    if os.path.exists(delay_file):
        time.sleep(float(open(delay_file).read()))
    for _ in range(6000):
        if not os.path.exists(os.path.join(HERE, "hold")):
            break
        time.sleep(0.01)
    return n


if __name__ == "__main__":
    serve({"main.step": step}, declared_in="main.flow")
