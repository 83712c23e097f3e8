"""Neural-network layers and functions on named arrays (Haliax's ``haliax.nn``)."""
