"""An independent restatement of poprand's documented random-number scheme.

Not a test module (no ``test_`` prefix); imported by ``test_poprand.py`` and
``test_poprand_seed.py`` to compute expected values without the library.
"""

from __future__ import annotations

import numpy as np


def tile_draws(
    seed: tuple[int, int], modifier: int, tiles: np.ndarray, gaussian: bool = False
) -> np.ndarray:
    """The draws after ``setSeed(seed)`` for elements on ``tiles`` (one tile id per
    element, in flat order).

    Per tile: the state from ``SeedSequence([seed0, seed1, modifier ^ 0x55555555,
    (tile << 4) ^ 0xAAAAAAA0])`` (24 words) seeds a Philox generator, which gives the
    tile's elements in flat order (uniform in [0, 1), or standard normal).
    """
    out = np.empty(tiles.size)
    for tile in np.unique(tiles).tolist():
        words = [seed[0], seed[1], modifier ^ 0x55555555, (tile << 4) ^ 0xAAAAAAA0]
        state = np.random.SeedSequence(words).generate_state(24, np.uint32)
        gen = np.random.Generator(np.random.Philox(np.random.SeedSequence(state.tolist())))
        sel = np.flatnonzero(tiles == tile)
        out[sel] = gen.standard_normal(sel.size) if gaussian else gen.random(sel.size)
    return out
