"""Which KV-cache blocks each request holds: allocation, sharing of cached prefixes, eviction.

Pure bookkeeping over block indices ``0 .. num_blocks - 1`` (the device arrays are
:class:`~pygpukit.llm.engine.paged_cache.PagedKVCache`). A block is

- **free**: never filled or its content forgotten; handed out first;
- **in use**: held by one or more requests (``refs > 0``); a full block whose tokens are known
  is also **registered** under the hash of its token prefix, so a request whose prompt starts
  with the same tokens takes it without recomputing or copying it;
- **cached**: registered, no longer held (``refs == 0``): kept for a later hit until a fresh
  block is needed and none is free, then evicted, least recently released first.

The hash of block ``i`` covers every token up to its end (the previous block's hash and its own
16 tokens), so equal hashes mean equal prefixes, hence equal keys and values.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["BlockManager", "block_hashes"]


def block_hashes(tokens: Sequence[int], block_size: int, start: bytes = b"") -> list[bytes]:
    """The prefix hash of every full block of ``tokens`` (a partial last block has none)."""
    hashes: list[bytes] = []
    prev = start
    for b in range(len(tokens) // block_size):
        chunk = tokens[b * block_size : (b + 1) * block_size]
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(b",".join(str(int(t)).encode() for t in chunk))
        prev = h.digest()
        hashes.append(prev)
    return hashes


class BlockManager:
    """Reference-counted KV blocks with a prefix-hash table and LRU eviction of cached ones."""

    def __init__(self, num_blocks: int, block_size: int, *, prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"the KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self._refs = [0] * num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() gives block 0 first
        self._hash_of: dict[int, bytes] = {}
        self._by_hash: dict[bytes, int] = {}
        self._cached: OrderedDict[int, None] = OrderedDict()  # refs == 0 and registered, LRU first

    # --- counts -------------------------------------------------------------------------------

    @property
    def used(self) -> int:
        """Blocks held by at least one request."""
        return self.num_blocks - len(self._free) - len(self._cached)

    @property
    def cached(self) -> int:
        """Blocks holding a registered prefix that no request holds (evictable)."""
        return len(self._cached)

    @property
    def available(self) -> int:
        """Blocks :meth:`allocate` can hand out now: free ones and evictable cached ones."""
        return len(self._free) + len(self._cached)

    # --- allocation ---------------------------------------------------------------------------

    def allocate(self) -> int:
        """A fresh block (``refs = 1``): a free one, else the least recently released cached one.

        Raises ``RuntimeError`` when none is available (callers check :attr:`available`).
        """
        if self._free:
            block = self._free.pop()
        elif self._cached:
            block, _ = self._cached.popitem(last=False)
            del self._by_hash[self._hash_of.pop(block)]
        else:
            raise RuntimeError("no KV block is available; check `available` before allocating")
        self._refs[block] = 1
        return block

    def match_prefix(self, hashes: Sequence[bytes]) -> list[int]:
        """The blocks of the longest registered prefix of ``hashes``; takes nothing (see take)."""
        found: list[int] = []
        if self.prefix_caching:
            for h in hashes:
                block = self._by_hash.get(h)
                if block is None:
                    break
                found.append(block)
        return found

    def take(self, blocks: Sequence[int]) -> None:
        """Add a reference to each of ``blocks`` (shared prefix blocks, from match_prefix)."""
        for block in blocks:
            if self._refs[block] == 0:
                del self._cached[block]
            self._refs[block] += 1

    def cost_of(self, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` are cached but unheld: taking them lowers :attr:`available`."""
        return sum(1 for b in blocks if self._refs[b] == 0)

    def register(self, block: int, block_hash: bytes) -> None:
        """Record that ``block`` (held, now full) holds the prefix ``block_hash``.

        A prefix already registered under another block keeps that block; this one stays
        private to its request and is freed normally.
        """
        if not self.prefix_caching or block in self._hash_of or block_hash in self._by_hash:
            return
        self._hash_of[block] = block_hash
        self._by_hash[block_hash] = block

    def release(self, blocks: Sequence[int]) -> None:
        """Drop one reference to each block; unreferenced ones become cached or free.

        Released in reverse so a request's tail blocks (least likely to be shared) are evicted
        before its head.
        """
        for block in reversed(blocks):
            refs = self._refs[block] - 1
            if refs < 0:
                raise RuntimeError(f"KV block {block} released more often than it was taken")
            self._refs[block] = refs
            if refs == 0:
                if block in self._hash_of:
                    self._cached[block] = None
                else:
                    self._free.append(block)
