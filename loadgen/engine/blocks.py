"""Prompt blocks named by hash ids (a Mooncake trace's `hash_ids`): each id is one block of
`block_tokens` tokens whose text depends only on (workload seed, id), so two requests naming
the same ids open with the same text and a prefix cache sees the reuse the trace recorded. A
request's last block may be cut short: it is the first part of its id's block, so it is still
the same prefix."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import numpy as np

# Block texts kept: a trace names many ids, each a few KiB of text, and a block is quick to
# make again (one seeded draw), so the cache stays small and least-recently-used.
MAX_CACHED_BLOCKS = 2048

Words = Callable[[np.random.Generator, int], str]  # words for a number of tokens


class PrefixBlocks:
    """The text of a run of hash-id blocks, made the same way in every shard of a run."""

    def __init__(self, seed: int, block_tokens: int, words: Words) -> None:
        self._seed = seed
        self._block = block_tokens
        self._words = words
        self._cache: OrderedDict[int, list[str]] = OrderedDict()

    def _block_words(self, hash_id: int) -> list[str]:
        got = self._cache.get(hash_id)
        if got is not None:
            self._cache.move_to_end(hash_id)
            return got
        rng = np.random.default_rng([self._seed, 0xB10C, hash_id])
        made = self._words(rng, self._block).split()
        self._cache[hash_id] = made
        if len(self._cache) > MAX_CACHED_BLOCKS:
            self._cache.popitem(last=False)
        return made

    def text(self, ids: tuple[int, ...], tokens: int) -> str:
        """The first `tokens` tokens of the blocks `ids` in order (each block `block_tokens`
        long, the last cut where `tokens` ends)."""
        parts: list[str] = []
        left = tokens
        for h in ids:
            if left <= 0:
                break
            words = self._block_words(h)
            if left < self._block:  # a partial block: the first words of the same block
                words = words[: max(1, round(len(words) * left / self._block))]
            parts.append(" ".join(words))
            left -= self._block
        return " ".join(parts)
