"""The slot launcher: one tfring job on processes a scheduler already started (Spark tasks, Ray actors), so that
the ranks are their children. The driver's side is job.SlotJob (its service: service.py); each slot runs
task.serve_slot (its task service: exec_service.py; slot 0's mpirun: launcher.py); PRRTE reaches the other hosts'
slots through agent.py; the ranks run rank.py. The signed channel's payloads: wire.py."""
from tfring.runner.slots.job import LaunchError, RankError, SlotJob  # noqa: F401 (the driver's API: tfring.spark, tfring.ray)
