"""Sharded optimizer state for the Keras DistributedOptimizer (ZeRO stages 1 and 2, sharded=1|2), one implementation
for every backend: Keras ops plus the binding's reducescatter and allgather (compiled into the JAX trainer's jitted
step, graph ops in TensorFlow's tf.function, eager on torch).

The trainable variables of one dtype are laid end to end in a flat vector cut into buckets (Layout: at most
BUCKET_BYTES each, a variable may span buckets), each padded to a multiple of the set's size n; rank r owns
elements [r*s, (r+1)*s) of every bucket (s = ceil(length / n)). Each step, bucket by bucket: the flat gradient is
reduce-scattered (each rank receives the average of its shard), the rank's shard of the current weights is copied
into a shard variable (so weights changed outside the optimizer, by a broadcast or load_weights, are what it
updates), the inner optimizer updates the shard variables, whose state (Adam's moments, ...) is therefore 1/n of the
unsharded one, and the updated shards are all-gathered back into the model's variables. Stage 2 differs only with
backward_passes_per_step > 1: the gradients are reduce-scattered on every pass and only the shard is accumulated
(stage 1 accumulates the whole local gradient and communicates on the k-th pass).

Checkpoints hold the unsharded layout (save_own_variables all-gathers each state shard and cuts it per variable;
load_own_variables cuts its shard back out), so a state saved at one size loads at another, sharded or not."""
import math
import re

import keras
import numpy as np
from keras import ops

from tfring.common.reduce_ops import Sum

STAGES = (1, 2)
# Optimizers whose update of an element depends on that element's gradient and state only (so a flat shard is
# updated exactly as the variables' slices would be); Adafactor, Lamb, Muon & co. use per-variable shapes or norms.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Nadam", "Ftrl", "Lion")


BUCKET_BYTES = 16 << 20  # a bucket's flat vector: what one step's temporaries hold at a time, per collective


class Layout:
    """Where each trainable variable lies in its dtype's flat vector, cut into buckets of at most BUCKET_BYTES
    (a variable may span buckets), and this rank's shard of each bucket: a bucket of L elements padded to size * s
    (s = ceil(L / size)), rank r owning [r*s, (r+1)*s). Buckets bound the full-size temporaries of a step (the
    flat gradient, the gathered weights) to a bucket's, so the state saved is not spent again on them.

    Args:
        variables: the model's trainable variables (the same order on every rank).
        rank, size: this rank's position in the process set and the set's size.
        bucket_bytes: the most bytes of one bucket (default BUCKET_BYTES).
    """

    def __init__(self, variables, rank, size, bucket_bytes=None, per_variable=False):
        bucket_bytes = bucket_bytes or BUCKET_BYTES
        self.rank, self.size, self.per_variable = rank, size, per_variable
        self.shapes = [tuple(v.shape) for v in variables]
        self.dtypes = [str(v.dtype) for v in variables]
        self.counts = [int(math.prod(shape)) for shape in self.shapes]
        self.buckets = []  # [{"dtype", "pieces": [(var, lo, hi)], "length", "shard", "mine": [(var, lo, hi)]}]
        if per_variable:  # one bucket per variable, cut like reducescatter's rows: no padding, no concatenation
            for i, count in enumerate(self.counts):
                b = {"dtype": self.dtypes[i], "pieces": [(i, 0, count)], "length": count,
                     "blocks": tuple(count // size + (r < count % size) for r in range(size))}
                self.buckets.append(b)
                self._place(b)
            return
        by_dtype = {}
        for i, v in enumerate(variables):
            by_dtype.setdefault(str(v.dtype), []).append(i)
        for dtype, indexes in by_dtype.items():
            limit = max(size, bucket_bytes // np.dtype(dtype).itemsize)
            bucket = None
            for i in indexes:
                lo = 0
                while lo < self.counts[i] or (self.counts[i] == 0 and lo == 0):
                    if bucket is None or bucket["length"] >= limit:
                        bucket = {"dtype": dtype, "pieces": [], "length": 0}
                        self.buckets.append(bucket)
                    hi = min(self.counts[i], lo + limit - bucket["length"])
                    bucket["pieces"].append((i, lo, hi))
                    bucket["length"] += hi - lo
                    if hi == lo:
                        break
                    lo = hi
        for b in self.buckets:
            s = max(1, -(-b["length"] // size))
            b["blocks"] = (s,) * size
            self._place(b)

    def _place(self, bucket):
        """This rank's start, shard length and pieces from the bucket's blocks (every rank's shard length)."""
        blocks = bucket["blocks"]
        bucket["start"], bucket["shard"] = sum(blocks[:self.rank]), blocks[self.rank]
        bucket["total"] = sum(blocks)
        bucket["mine"] = self._within(bucket, bucket["start"], bucket["start"] + bucket["shard"])

    @staticmethod
    def _within(bucket, start, end):
        """The pieces of the bucket's elements [start, end)."""
        out, at = [], 0
        for i, lo, hi in bucket["pieces"]:
            a, z = max(start, at), min(end, at + hi - lo)
            if a < z:
                out.append((i, lo + a - at, lo + z - at))
            at += hi - lo
        return out

    def _concat(self, bucket, pieces, values, length):
        parts = [_slice(ops.reshape(values[i], (-1,)), lo, hi, self.counts[i]) for i, lo, hi in pieces]
        pad = length - sum(hi - lo for _, lo, hi in pieces)
        if pad or not parts:
            parts.append(ops.zeros((pad,), dtype=bucket["dtype"]))
        return concat(parts)

    def flat(self, bucket, values):
        """The bucket's flat vector of `values` (one per variable), padded to every rank's blocks."""
        return self._concat(bucket, bucket["pieces"], values, bucket["total"])

    def mine(self, bucket, values):
        """This rank's shard of the bucket's flat vector of `values`, built from those slices only."""
        return self._concat(bucket, bucket["mine"], values, bucket["shard"])

    def numpy_flat(self, bucket, values):
        """flat() of numpy values, in numpy (checkpoints)."""
        parts = [np.asarray(values[i]).reshape(-1)[lo:hi] for i, lo, hi in bucket["pieces"]]
        parts.append(np.zeros(bucket["total"] - bucket["length"], dtype=bucket["dtype"]))
        return np.concatenate(parts)


def _slice(flat, lo, hi, count):
    return flat if (lo, hi) == (0, count) else flat[lo:hi]  # whole: no slice op (XLA may copy one)


def concat(parts):
    """1-D pieces end to end. As rows of one: XLA's CPU concatenate of 1-D vectors copies at ~0.2 GB/s on one
    thread, of (1, n) rows along axis 1 at memcpy speed (jitted, 84 MB: 0.26 s against 0.055 s); the other
    backends copy either alike."""
    if len(parts) == 1:
        return parts[0]
    return ops.reshape(ops.concatenate([ops.reshape(p, (1, -1)) for p in parts], axis=1), (-1,))


def check_inner(who, optimizer):
    """What cannot combine with sharding, said by name (never silently wrong)."""
    if not isinstance(optimizer, tuple(getattr(keras.optimizers, n) for n in ELEMENTWISE)):
        raise ValueError("%s: sharded: %s updates by per-variable shapes or norms, which a flat shard does not "
                         "have; sharding supports element-wise optimizers (%s)" % (
                             who, type(optimizer).__name__, ", ".join(ELEMENTWISE)))
    if getattr(optimizer, "_exclude_from_weight_decay", None) or \
            getattr(optimizer, "_exclude_from_weight_decay_pattern", None):
        raise ValueError("%s: sharded: exclude_from_weight_decay names variables, which a flat shard mixes; decay "
                         "every variable or do not shard" % who)
    if getattr(optimizer, "clipnorm", None):
        raise ValueError("%s: sharded: the inner optimizer's clipnorm=%r clips each variable by its own norm, which "
                         "spans shards; use global_clipnorm (computed across the shards) instead"
                         % (who, optimizer.clipnorm))


def global_norm_scale(shards, clipnorm, reduce_sum):
    """The factor min(1, clipnorm / global norm) of the gradient shards (the sum of squares reduced over the set)."""
    squares = ops.sum(ops.stack([ops.sum(ops.square(ops.cast(s, "float32"))) for s in shards]))
    norm = ops.sqrt(reduce_sum(squares))
    return ops.minimum(1.0, clipnorm / ops.maximum(norm, 1e-12))


def current_place(process_set):
    """(this rank's rank, the size) in process_set, or in the job when None."""
    from tfring.common import topology
    return (topology.rank(), topology.size()) if process_set is None else (process_set.rank(), process_set.size())


class Sharding:
    """The sharded path of one DistributedOptimizer (built with its variables).

    Args:
        owner: the DistributedOptimizer (it creates the shard variables, so they are part of its state).
        variables: the model's trainable variables.
        binding: the backend's tfring binding (reducescatter, allgather, allreduce).
        op: Average or Sum.
        process_set: the set to shard over, or None (every rank).
        compression: the binding's Compression class member for the wire.
        write_flat: the backend's in-place write of elements [lo, hi) of a variable's flat view (torch), or None:
            then a variable is assigned whole (its pieces concatenated first).
        per_variable: each variable its own bucket, cut like reducescatter's rows, and one grouped reduce-scatter
            and all-gather per step (JAX: XLA copies every concatenation and slice inside the jitted step, which
            buckets pay twice per step; measured in docs/sharded-optimizer.md).
    """

    def __init__(self, owner, variables, binding, op, process_set, compression, write_flat=None, per_variable=False):
        self.binding, self.op, self.compression, self.write_flat = binding, op, compression, write_flat
        self.kwargs = {} if process_set is None else {"process_set": process_set}
        self.rank, self.size = rank, size = current_place(process_set)
        if rank is None or rank < 0:
            raise ValueError("tfring.keras.DistributedOptimizer: sharded on a rank outside process_set %r"
                             % (process_set,))
        self.layout = Layout(variables, rank, size, per_variable=per_variable)
        self.accumulators = []  # stage 2 over backward passes: the owner's gradient-shard accumulators (per bucket)
        self.params = [owner.add_variable((b["shard"],), dtype=b["dtype"], initializer="zeros",
                                          name="param_shard_%d" % k) for k, b in enumerate(self.layout.buckets)]

    def reduce(self, grads):
        """The averaged (or summed) shards of the gradients, one per bucket."""
        grads = [ops.zeros(s, dtype=d) if g is None else g
                 for g, s, d in zip(grads, self.layout.shapes, self.layout.dtypes)]
        if self.layout.per_variable:
            wire = [self.compression.compress(self.layout.flat(b, grads)) for b in self.layout.buckets]
            shards = self.binding.grouped_reducescatter([w for w, _ in wire], name="sharded.grads", op=self.op,
                                                        **self.kwargs)
            return [self.compression.decompress(s, ctx) for s, (_, ctx) in zip(shards, wire)]
        out = []
        for k, b in enumerate(self.layout.buckets):
            wire, ctx = self.compression.compress(self.layout.flat(b, grads))
            shard = self.binding.reducescatter(wire, name="sharded.grads.%d" % k, op=self.op, **self.kwargs)
            out.append(self.compression.decompress(shard, ctx))
        return out

    def load_params(self, variables):
        """Copies this rank's shard of the current weights into the shard variables."""
        values = [v.value for v in variables]
        for b, p in zip(self.layout.buckets, self.params):
            if self.write_flat is None:
                mine = self.layout.mine(b, values)
                if self.layout.per_variable and b["shard"]:
                    # JAX: written over the shard's own value, so the jitted step reads its (donated) input and
                    # XLA writes the updated shard back into that buffer; assigned whole, the input went unused,
                    # was pruned, and every step allocated the shard afresh (memory_analysis at np=2: 48 MiB of
                    # output not aliased, 32 MiB more temporaries; peak RSS above the unsharded optimizer's).
                    mine = ops.slice_update(p.value, (0,), mine)
                p.assign(mine)
                continue
            at = 0  # in place, piece by piece: no shard-sized temporary
            for i, lo, hi in b["mine"]:
                self.write_flat(p, at, at + hi - lo, ops.reshape(values[i], (-1,))[lo:hi])
                at += hi - lo
            if at < b["shard"]:
                self.write_flat(p, at, b["shard"], ops.zeros((b["shard"] - at,), dtype=b["dtype"]))

    def store_params(self, variables):
        """All-gathers the updated shards into the model's variables (each assigned once it is whole)."""
        parts, buckets = {}, self.layout.buckets
        if self.layout.per_variable:
            fulls = self.binding.grouped_allgather([p.value for p in self.params], name="sharded.params",
                                                   sizes=[b["blocks"] for b in buckets], **self.kwargs)
        else:
            fulls = (self.binding.allgather(p.value, name="sharded.params.%d" % k, **self.kwargs)
                     for k, p in enumerate(self.params))
        for b, full in zip(buckets, fulls):
            at = 0
            for i, lo, hi in b["pieces"]:
                piece, at = _slice(full, at, at + hi - lo, b["total"]), at + hi - lo
                if self.write_flat is not None:  # in place: no whole-variable temporary
                    self.write_flat(variables[i], lo, hi, piece)
                    continue
                parts.setdefault(i, []).append(piece)
                if hi == self.layout.counts[i]:
                    whole = concat(parts.pop(i))
                    variables[i].assign(ops.reshape(whole, self.layout.shapes[i]))

    def clip_scale(self, shards, clipnorm):
        def reduce_sum(x):
            return self.binding.allreduce(x, name="sharded.norm", op=Sum, **self.kwargs)
        return global_norm_scale(shards, clipnorm, reduce_sum)

    # -- checkpoints in the unsharded layout --

    def _gather(self, shard, k, what):
        full = self.binding.allgather(shard, name="sharded.save.%s.%d" % (what, k), **self.kwargs)
        return np.asarray(keras.ops.convert_to_numpy(full))

    def _own(self, owner_variables):
        """The wrapper's own variables an unsharded one also has (not the shard copies of the weights), except
        stage 2's gradient-shard accumulators, which stand for its per-variable accumulators (they come last)."""
        return [v for v in owner_variables if not any(v is p for p in self.params + self.accumulators)]

    def plain_variables(self, owner_variables, inner):
        """The wrapper's own variables (_own), then the inner optimizer's plain ones in its order: the same list on
        every rank at any size (reshard rebuilds what build() made in build()'s order)."""
        kinds = sharded_kinds(inner, self.params)
        return self._own(owner_variables) + [v for v, k in zip(inner.variables, kinds) if k[0] == "plain"]

    def saved_values(self, owner_variables, inner):
        """Every optimizer value in the unsharded layout (numpy): the wrapper's own, then the inner optimizer's in
        the order an unsharded one keeps them, each state shard all-gathered and cut per variable."""
        kinds = sharded_kinds(inner, self.params)
        plain = [keras.ops.convert_to_numpy(v.value) for v, k in zip(inner.variables, kinds) if k[0] == "plain"]
        slots = {suffix: self.unshard([v for v, k in zip(inner.variables, kinds) if k[0] == "slot" and k[2] == suffix],
                                      suffix)
                 for suffix in sorted({k[2] for k in kinds if k[0] == "slot"})}
        order = unsharded_order(inner, len(self.layout.shapes))
        accumulated = self.unshard(self.accumulators, "accumulator") if self.accumulators else []
        return [keras.ops.convert_to_numpy(v.value) for v in self._own(owner_variables)] + accumulated + \
            [plain[e[1]] if e[0] == "plain" else slots[e[2]][e[1]] for e in order]

    def load_values(self, owner_variables, inner, values, who):
        """Takes saved_values' layout (saved at any size, or by an unsharded optimizer); keeps this rank's shard."""
        own, order = self._own(owner_variables), unsharded_order(inner, len(self.layout.shapes))
        accumulated = len(self.layout.shapes) if self.accumulators else 0
        if len(values) != len(own) + accumulated + len(order):
            raise ValueError("%s: the checkpoint holds %d optimizer values, an unsharded %s on %d variables has %d"
                             % (who, len(values), type(inner).__name__, len(self.layout.shapes),
                                len(own) + accumulated + len(order)))
        for v, value in zip(own, values):
            v.assign(value)
        if accumulated:
            self.reshard(values[len(own):len(own) + accumulated], self.accumulators)
        values = values[len(own) + accumulated:]
        plain = [values[n] for n, e in enumerate(order) if e[0] == "plain"]
        per_slot = {}
        for n, e in enumerate(order):
            if e[0] == "slot":
                per_slot.setdefault(e[2], [None] * len(self.layout.shapes))[e[1]] = values[n]
        kinds = sharded_kinds(inner, self.params)
        for v, k in zip(inner.variables, kinds):
            if k[0] == "plain":
                v.assign(plain[k[1]])
        for suffix, per_var in per_slot.items():
            self.reshard(per_var, [v for v, k in zip(inner.variables, kinds) if k[0] == "slot" and k[2] == suffix])

    def unshard(self, shards, what):
        """Per-variable numpy values (in variable order) of one state kind held as shards, one per bucket."""
        parts = [[] for _ in self.layout.shapes]
        for k, (b, shard) in enumerate(zip(self.layout.buckets, shards)):
            full, at = self._gather(shard.value, k, what), 0
            for i, lo, hi in b["pieces"]:
                parts[i].append(full[at:at + hi - lo])
                at += hi - lo
        return [np.concatenate(p).reshape(shape) for p, shape in zip(parts, self.layout.shapes)]

    def reshard(self, values, shards):
        """Assigns this rank's shard of per-variable numpy `values` to the shard variables."""
        for b, shard in zip(self.layout.buckets, shards):
            start = b["start"]
            shard.assign(self.layout.numpy_flat(b, values)[start:start + b["shard"]])


def unsharded_order(inner, count):
    """The variables an unsharded `inner` would have on `count` model variables, in its order: ("plain", j) for its
    j-th own variable (iterations, learning rate), ("slot", i, suffix) for variable i's state. Read off a clone
    built on `count` stand-in variables: where each kind goes is the optimizer's business, not ours."""
    probe = type(inner).from_config(inner.get_config())
    probe.build([keras.Variable(np.zeros((1,), "float32"), name="tfring_probe_%d" % i) for i in range(count)])
    order, plain, pattern = [], 0, re.compile(r"tfring_probe_(\d+)_(.+)$")
    for v in probe.variables:
        found = pattern.search(v.name)
        if found:
            order.append(("slot", int(found.group(1)), found.group(2)))
        else:
            order.append(("plain", plain))
            plain += 1
    return order


def sharded_kinds(inner, params):
    """The sharded inner optimizer's variables, as ("plain", j) or ("slot", group k, suffix)."""
    prefixes = [p.path.replace("/", "_") + "_" for p in params]
    kinds, plain = [], 0
    for v in inner.variables:
        k = next((k for k, pre in enumerate(prefixes) if v.name.startswith(pre)), None)
        if k is None:
            kinds.append(("plain", plain))
            plain += 1
        else:
            kinds.append(("slot", k, v.name[len(prefixes[k]):]))
    return kinds
