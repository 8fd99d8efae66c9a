"""A stand-in payment provider: the first charge of an amount times out (Unknown), a retry works."""

from flowrt import unknown
from flowrt.toolkit import serve

SEEN: set[int] = set()


def charge(amount: int):
    if amount not in SEEN:
        SEEN.add(amount)
        return unknown("connection reset")
    return f"charged {amount}"


if __name__ == "__main__":
    serve({"payments.charge": charge}, declared_in="payments.flow")
