"""horovod.runner.util.threads: the thread helper Horovod's test utilities (test/utils/common.py) import."""
import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts `target(*args)` in a (daemon) thread and returns the thread."""
    def run():
        try:
            target(*args)
        except BaseException:
            if not silent:
                raise
    thread = threading.Thread(target=run, name=name, daemon=daemon)
    thread.start()
    return thread
