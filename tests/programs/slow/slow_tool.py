"""Answers `main.ask` after SLOW_TOOL_SECONDS (from a file beside it), logging each call id."""

import os
import time

from flowrt.toolkit import serve

HERE = os.path.dirname(os.path.abspath(__file__))


def ask(question: str):
    with open(os.path.join(HERE, "calls.log"), "a") as log:
        log.write(question + "\n")
    delay_file = os.path.join(HERE, "delay")
    delay = float(open(delay_file).read()) if os.path.exists(delay_file) else 0.0
    time.sleep(delay)
    return f"yes ({question})"


if __name__ == "__main__":
    serve({"main.ask": ask}, declared_in="main.flow")
