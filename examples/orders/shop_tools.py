"""A stand-in shop: implements the Tools of shop.flow over the JSON-lines Tool protocol."""

import hashlib

from flowrt.toolkit import serve
from flowrt import failed, unknown

STOCK = {"kettle": 5, "teapot": 1}
ATTEMPTS: dict[str, int] = {}


def reserve(item: str, quantity: int):
    if STOCK.get(item, 0) < quantity:
        return failed("Unavailable")
    return None


def charge(order: str, cents: int):
    ATTEMPTS[order] = ATTEMPTS.get(order, 0) + 1
    if cents > 100_000:
        return failed({"CardDeclined": "over the card limit"})
    if ATTEMPTS[order] == 1 and order.endswith("-flaky"):
        return unknown("the provider timed out")
    return "ch_" + hashlib.sha256(f"{order}:{cents}".encode()).hexdigest()[:10]


def ship(order: str, item: str):
    return "TRK-" + hashlib.sha256(order.encode()).hexdigest()[:8].upper()


if __name__ == "__main__":
    serve({"shop.reserve": reserve, "shop.charge": charge, "shop.ship": ship}, declared_in="shop.flow")
