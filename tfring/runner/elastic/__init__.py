"""The elastic driver: the one book every launcher serves to the ranks (book.py, with exits.py), over a slot source:
tfringrun's discovered hosts (discovered.py, from the discovery script: discovery.py) or a Spark/Ray job's registered
slots (tfring.runner.slots.registered); tfringrun's mpirun loop (driver.py) and its listeners (listeners.py)."""
