"""Argument checks of tfring.torch.DistributedOptimizer: parameter names and groups."""
import torch


def split_list(items, n):
    """`n` contiguous chunks of `items`, sizes differing by at most one (the first ones larger)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def parameter_names(param_groups, named_parameters):
    """{parameter: name} for every parameter of the optimizer; ValueError naming what is wrong otherwise."""
    if named_parameters is None:
        # Positions are the same on every rank that built the same model and optimizer.
        return {p: "allreduce.noname.%d.%d" % (i, j)
                for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])}
    named_parameters = list(named_parameters)
    for item in named_parameters:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], torch.Tensor)):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually produced by "
                             "model.named_parameters(); got an item of type %s" % type(item).__name__)
    seen, dups = set(), set()
    for name, _ in named_parameters:
        (dups if name in seen else seen).add(name)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(sorted(dups)))
    # Tensors hash by identity. One tensor under two names gets the last of them in sorted order, on every rank.
    names = {p: name for name, p in sorted(named_parameters, key=lambda item: item[0])}
    unnamed = ["param_groups[%d]['params'][%d] (shape %s)" % (i, j, tuple(p.shape))
               for i, group in enumerate(param_groups) for j, p in enumerate(group["params"]) if p not in names]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not named: %s. "
                         "Pass model.named_parameters() of the model whose parameters the optimizer updates."
                         % ", ".join(unnamed))
    return names


def check_groups(groups):
    if isinstance(groups, bool) or not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a positive integer or a list of list of torch.Tensor, got %r" % (groups,))
    if isinstance(groups, list):
        ids = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor, got a %s" % type(p).__name__)
                if id(p) in ids:
                    raise ValueError("groups: a parameter can only appear once in groups (shape %s appears twice)"
                                     % (tuple(p.shape),))
                ids.add(id(p))
