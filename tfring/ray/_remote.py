"""RayExecutor.run_remote's object refs. Horovod's returns one ObjectRef per worker (an actor method call); tfring's
calls reach every rank at once through the slot job on the driver, so each ref is a call to a small async actor
(no CPU reserved) that answers once the driver's call thread has posted that call's values. Values are dropped
once every rank's ref has been answered."""
import ray


# Every ref is a get() waiting on the actor's one event loop; Ray's default of 1000 concurrent calls would let
# waiting gets starve the put() that answers them (64 workers x 16 queued calls). Waiting coroutines are cheap.
@ray.remote(num_cpus=0, max_concurrency=1 << 20)
class Mailbox:
    """Per call (seq): every rank's value, or the call's error, handed to each waiting ref."""

    def __init__(self, size):
        import asyncio
        self._asyncio, self._size = asyncio, size
        self._posted, self._events, self._served = {}, {}, {}

    def _event(self, seq):
        return self._events.setdefault(seq, self._asyncio.Event())

    async def put(self, seq, ok, value):
        """Posts a call's outcome: (True, [value per rank]) or (False, "why")."""
        self._posted[seq] = (ok, value)
        self._event(seq).set()

    async def get(self, seq, rank):
        """Rank `rank`'s value of call `seq`, once posted; raises the call's error as a RuntimeError."""
        await self._event(seq).wait()
        ok, value = self._posted[seq]
        self._served[seq] = self._served.get(seq, 0) + 1
        if self._served[seq] == self._size:  # every ref answered: forget the call
            del self._posted[seq], self._events[seq], self._served[seq]
        if not ok:
            raise RuntimeError(value)
        return value[rank]
