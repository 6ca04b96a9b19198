"""tfring.migrate: find (and rewrite) the Keras 2 / TF1 / Horovod constructs a script needs changed for tfring on
Keras 3. A source-to-source tool: it reads the script with `ast` and imports no framework.

    python -m tfring.migrate train.py            # report: file:line:col, what it is, what to write instead
    python -m tfring.migrate --write train.py    # rewrite the mechanical ones in place (original: train.py.bak)

From Python: `migrate_source(text)` returns (new text, fixed findings, findings left). docs/migrating.md has the list.
"""
from tfring.migrate.core import Finding, analyze, migrate
from tfring.migrate import rules_horovod, rules_keras, rules_keras_api, rules_tf1

RULES = rules_horovod.RULES + rules_keras.RULES + rules_keras_api.RULES + rules_tf1.RULES


def find(source, filename="<script>", ignore=()):
    """Every construct `source` needs changed, as Findings in source order."""
    return analyze(source, RULES, filename, ignore)


def migrate_source(source, filename="<script>", ignore=()):
    """(rewritten source, the mechanical findings fixed, the findings left in the rewritten source)."""
    return migrate(source, RULES, filename, ignore)


__all__ = ["Finding", "RULES", "find", "migrate_source"]
