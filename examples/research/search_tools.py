"""Stand-ins for the three search services, answering from a small fixed corpus. The papers
index answers at once but knows only studies; the web takes 0.3 s; the archive 1.5 s and knows
everything. A query a service has nothing for is `NoResults` (at the same speed)."""

import time

from flowrt import failed
from flowrt.toolkit import serve

CORPUS = {
    "papers": [
        {"title": "Four-day week trial: results from 61 UK companies", "url": "https://example.org/papers/4dw-uk",
         "snippet": "Revenue stayed broadly the same and 56 of 61 companies continued the four-day week.",
         "words": {"trial", "productivity", "study"}},
    ],
    "web": [
        {"title": "What happened after Iceland's shorter-week trials", "url": "https://example.org/web/iceland",
         "snippet": "Trials in Iceland's public sector cut hours without a drop in service.",
         "words": {"iceland", "public", "sector"}},
        {"title": "Burnout and the shorter week", "url": "https://example.org/web/burnout",
         "snippet": "Employees in the trials reported less burnout and better sleep.",
         "words": {"burnout", "wellbeing", "employees"}},
    ],
}
CORPUS["archive"] = CORPUS["papers"] + CORPUS["web"]
DELAY = {"papers": 0.0, "web": 0.3, "archive": 1.5}


def searcher(service: str):
    def search(query: str):
        time.sleep(DELAY[service])
        words = set(query.lower().split())
        hits = [{k: v for k, v in s.items() if k != "words"} for s in CORPUS[service] if s["words"] & words]
        return hits if hits else failed("NoResults")
    return search


if __name__ == "__main__":
    serve({f"search.{service}": searcher(service) for service in DELAY}, declared_in="search.flow")
