"""Answers `rounds.work` after a short, varying delay, logging every (run, call id) it is sent."""

import json
import os
import random
import sys
import threading
import time

from flowrt.toolkit import describe

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = os.environ.get("ROUNDS_LOG", os.path.join(HERE, "sent.log"))
lock = threading.Lock()


def answer(message: dict) -> None:
    with lock:
        with open(LOG, "a") as log:
            log.write(f"{message['run']} {message['id']}\n")
    time.sleep(random.random() * 0.004)
    args = message["arguments"]
    line = json.dumps({"id": message["id"], "outcome": {"Ok": args["round"] * 10 + args["part"]}})
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


for raw in sys.stdin:
    message = json.loads(raw)
    if message.get("op") == "describe":
        print(json.dumps({"op": "described", "tools": describe(os.path.join(HERE, "rounds.flow"), ["rounds.work"])}),
              flush=True)
    elif message.get("op") == "call":
        threading.Thread(target=answer, args=(message,), daemon=True).start()
