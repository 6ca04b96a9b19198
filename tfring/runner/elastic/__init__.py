"""tfringrun's elastic mode: the driver (driver.py) that keeps the books of an elastic job (book.py) from the
discovery script (discovery.py) and answers the ranks (listeners.py, exits.py). Imported only for elastic jobs."""
