"""Real clients behind the Protocols in :mod:`workers.clients`."""
