"""``InstanceTiers.begin_load`` touches the request's prefix, its first
``num_tokens // block_size`` block hashes (the lookup's blocks, every full block of the
prompt, as vLLM's offloading connector touches them): not whatever the
stream's cached chain holds beyond them (a chain extended further by an earlier use of the
stream, e.g. the blocks a preempted request published before it was readmitted)."""
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from engine_helpers import create_scheduler  # noqa: E402
from hooks import Hooks  # noqa: E402
from llmservingsim.cluster import Cluster  # noqa: E402
from llmservingsim.events import EventLoop  # noqa: E402
from llmservingsim.instance import Instance  # noqa: E402
from llmservingsim.kv_tiers import TierSpec, TierStore, attach_tiers  # noqa: E402
from llmservingsim.tokens import TokenStream  # noqa: E402


class _Timer:
    def time(self, out):
        raise AssertionError("no step runs here")


def _tiers():
    loop = EventLoop()
    hooks = Hooks()
    cluster = Cluster(loop, hooks)
    sched = create_scheduler(num_blocks=64, clock=lambda: loop.now, hooks=hooks)
    inst = Instance(0, loop, sched, _Timer(), hooks, False, cluster.finished)
    cluster.add_instance(inst)
    return attach_tiers(inst, [TierStore(TierSpec("cpu", 100, 1.0, 1.0, 0))], 1000, 1, hooks)


def _lru_after_begin_load(ids, num_tokens: int, cached_blocks: int) -> list:
    """The CPU tier's LRU order (as block indices) after ``begin_load`` of a request of
    ``num_tokens`` tokens (a stream of these ids, or none), its 8 blocks stored in order
    0..7, whose stream's chain was first extended to ``cached_blocks`` blocks."""
    tiers = _tiers()
    hashes = TokenStream(3, 16, ids=ids).block_hashes(8)[:8]       # a twin's chain
    stream = TokenStream(3, 16, ids=ids)
    stream.block_hashes(cached_blocks)
    cpu = tiers.stores[0]
    cpu.prepare_store(hashes, 0, 0)
    req = SimpleNamespace(request_id=1, owner=1, num_tokens=num_tokens, stream=stream)
    tiers.begin_load(req, 0, [])
    return [hashes.index(h) for h in cpu.blocks]


def test_begin_load_touches_the_lookup_prefix_only():
    # 80 tokens: the lookup's 80 // 16 = 5 blocks are touched, head last; 79 tokens: 4
    for num_tokens, expect in ((80, [5, 6, 7, 4, 3, 2, 1, 0]), (79, [4, 5, 6, 7, 3, 2, 1, 0])):
        for cached in (4, 5, 8):        # the chain as the lookup left it, or longer
            for ids in (None, list(range(200))):
                assert _lru_after_begin_load(ids, num_tokens, cached) == expect, (num_tokens, cached, ids)
