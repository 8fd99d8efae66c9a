from flowrt.toolkit import serve
serve({"main.tick": lambda n: n}, declared_in="main.flow")
