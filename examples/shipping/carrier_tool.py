"""A stand-in carrier: books a parcel and answers a tracking number derived from the address, so
the same address always gets the same number. It refuses Shetland (ZE) postcodes as undeliverable
and asks for a person's sign-off on Northern Ireland (BT) ones, which need a customs declaration."""

import hashlib

from flowrt.toolkit import serve


def book(address: dict):
    code = address["postcode"].replace(" ", "").upper()
    if code.startswith("ZE"):
        return {"Err": {"Failed": {"Undeliverable": "no service to the Shetland Islands"}}}
    if code.startswith("BT"):
        return {"Err": {"Failed": {"Restricted": "parcels to Northern Ireland need a customs declaration"}}}
    digest = hashlib.sha256(f"{address['name']}|{code}".encode()).hexdigest()[:8].upper()
    return {"Ok": {"tracking": f"TRK-{digest}", "postcode": address["postcode"]}}


if __name__ == "__main__":
    serve({"carrier.book": book}, declared_in="carrier.flow")
