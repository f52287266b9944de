"""Poisoned caches for the Part B checks: a read past a sequence's valid range must show.

A block table's unused entries are ``-1``; in torch, ``cache[-1]`` silently wraps to the last
block, so a gather that reads one entry too many lands on real memory and, when it throws the
extra rows away, passes. Two guards close that:

- the cache gets one extra block at its end, all NaN and in no table, so a wrap that reaches
  the output reads NaN;
- the cache is a `Tripwire` tensor: indexing it (or a view of it) with a negative block or slot
  id raises, so even a read whose rows are discarded later, or a write of a padding token, fails
  with the id it used.
"""

from __future__ import annotations

import dataclasses

import torch

from .batches import PagedBatch


class PaddingRead(IndexError):
    """A negative block or slot id reached the cache: padding was read or written."""


def _negative(index) -> int | None:
    """The first negative id in an index expression, or None."""
    if isinstance(index, bool):
        return None
    if isinstance(index, int):
        return index if index < 0 else None
    if isinstance(index, torch.Tensor):
        if index.dtype == torch.bool or index.dtype.is_floating_point or index.numel() == 0:
            return None
        low = int(index.min())
        return low if low < 0 else None
    if isinstance(index, (tuple, list)):
        for part in index:
            found = _negative(part)
            if found is not None:
                return found
    return None


# Where each indexing op takes its index: (position, keyword).
_INDEXING = {
    torch.Tensor.__getitem__: (1, None), torch.Tensor.__setitem__: (1, None),
    torch.index_select: (2, "index"), torch.Tensor.index_select: (2, "index"),
    torch.gather: (2, "index"), torch.Tensor.gather: (2, "index"),
    torch.take: (1, "index"), torch.Tensor.take: (1, "index"),
    torch.Tensor.index_put_: (1, "indices"), torch.Tensor.index_put: (1, "indices"),
    torch.index_put: (1, "indices"), torch.Tensor.index_copy_: (2, "index"),
    torch.Tensor.index_copy: (2, "index"), torch.index_copy: (2, "index"),
}


def _index_of(func, args, kwargs):
    position, keyword = _INDEXING[func]
    return kwargs[keyword] if keyword in kwargs else args[position] if len(args) > position else None


class Tripwire(torch.Tensor):
    """A cache tensor that refuses negative ids; views of it stay tripwires, copies do not
    (so the student's own arithmetic on gathered rows is ordinary torch)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _INDEXING and isinstance(args[0], Tripwire):
            bad = _negative(_index_of(func, args, kwargs))
            if bad is not None:
                raise PaddingRead(f"the cache was indexed with id {bad}: padding (a -1 block table entry past "
                                  "the sequence's last block, or a negative slot) was used as a real block or slot")
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
            storages = {a.untyped_storage().data_ptr() for a in args if isinstance(a, Tripwire)}
            return _rewrap(out, storages)


def _rewrap(out, storages):
    if isinstance(out, torch.Tensor):
        plain_out = out.as_subclass(torch.Tensor)
        return out.as_subclass(Tripwire) if out.untyped_storage().data_ptr() in storages else plain_out
    if isinstance(out, (tuple, list)):
        return type(out)(_rewrap(o, storages) for o in out)
    return out


def plain(t):
    """`t` as an ordinary tensor (what the driver records)."""
    return t.as_subclass(torch.Tensor) if isinstance(t, Tripwire) else t


def _with_nan_block(cache: torch.Tensor) -> torch.Tensor:
    nan = torch.full((1, *cache.shape[1:]), float("nan"), dtype=cache.dtype)
    return torch.cat([cache, nan]).as_subclass(Tripwire)


def poisoned(batch: PagedBatch) -> PagedBatch:
    """`batch` whose caches end in a NaN block (where a -1 wraps) and refuse negative ids."""
    return dataclasses.replace(batch, k_cache=_with_nan_block(batch.k_cache),
                               v_cache=_with_nan_block(batch.v_cache))
