"""Fair shares: how much of each dimension every queue deserves, given what queues want.

Hierarchical water-filling, one dimension at a time, level by level from the roots:
1. each child first gets its guarantee, up to what it wants (scaled down pro rata if the
   guarantees exceed what the parent has: the operator over-promised);
2. what is left is poured by weight into the children that still want more, each capped
   at what it wants and at its limit (a queue that may not borrow is capped at its
   guarantee), until nothing is left or nobody wants more;
3. each child's share is what its own children divide in turn.

"Wants" is what a queue holds plus what its pending pods ask. A queue that wants nothing
deserves nothing, so idle guarantees are lent out, and a queue asking again gets its
guarantee back through reclaim.
"""

from __future__ import annotations

import numpy as np

from gpufleet.core.quota import F64, QueueBook

_EPS = 1e-9


def fair_shares(book: QueueBook, want_leaf: F64) -> F64:
    """Fair share [queue, dimension]; `want_leaf` holds each leaf's demand (rows of inner queues ignored)."""
    want = _subtree_sums(book, want_leaf)
    fair = np.zeros_like(want)
    _divide(book, book.roots, book.capacity.copy(), want, fair)
    return fair


def _subtree_sums(book: QueueBook, leaf: F64) -> F64:
    total = np.where(np.array([book.is_leaf(q) for q in range(len(book.names))])[:, None], leaf, 0.0)
    out = total.copy()
    for q in range(len(book.names)):
        if book.is_leaf(q):
            for a in book.up[q][1:]:
                out[a] += total[q]
    return out


def _divide(book: QueueBook, kids: tuple[int, ...], avail: F64, want: F64, fair: F64) -> None:
    if not kids:
        return
    idx = list(kids)
    cap = np.minimum(want[idx], book.limit[idx])
    share = water_fill(avail, cap, book.guaranteed[idx], np.array([book.weight[k] for k in idx]))
    fair[idx] = share
    for k, row in zip(idx, share):
        _divide(book, book.children[k], row.copy(), want, fair)


def water_fill(avail: F64, cap: F64, guaranteed: F64, weight: F64) -> F64:
    """Divide `avail` [dim] among k claimants with caps [k, dim], guarantees [k, dim], weights [k]."""
    base = np.minimum(guaranteed, cap)
    total = base.sum(axis=0)
    over = total > avail
    if over.any():
        base[:, over] *= avail[over] / total[over]
    share = base
    rest = np.maximum(avail - share.sum(axis=0), 0.0)
    for _ in range(len(weight) + 1):
        active = share < cap - _EPS
        wsum = (weight[:, None] * active).sum(axis=0)
        pour = (rest > _EPS) & (wsum > 0)
        if not pour.any():
            break
        offer = np.where(active & pour, weight[:, None] * (rest / np.where(wsum > 0, wsum, 1.0)), 0.0)
        new = np.minimum(share + offer, cap)
        rest = rest - (new - share).sum(axis=0)
        share = new
    return share
