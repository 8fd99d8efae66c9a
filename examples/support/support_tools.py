"""Stand-in implementations of the support program's planner, web search and docs search.

They answer like the fakes in main_test.flow: the planner searches first, then asks a person,
then summarizes the notes; the web is slow and the docs answer fast, so the docs win the race.
"""

import time

from flowrt.toolkit import serve


def next_step(ticket: str, notes: list):
    if not notes:
        return {"Search": "safari login cookie"}
    if len(notes) == 1:
        return {"Ask": "Which Safari version does the customer use?"}
    return {"Done": " | ".join(notes)}


def web_search(query: str):
    time.sleep(5)
    return "a forum thread"


def docs_search(query: str):
    time.sleep(0.2)
    return "SameSite=None requires Secure ..."


if __name__ == "__main__":
    serve({"planner.next": next_step, "web.search": web_search, "docs.search": docs_search},
          declared_in="main.flow")
