"""The merge base's fast path (first-parent common ancestor found with skip pointers,
taken when no merge commit lies above it) agrees with the generation-number walk on random
histories with branches, merges and long linear stretches."""

from __future__ import annotations

import random
import time

from loch.backends import open_store
from loch.versioning import Put, VersionStore

TABLE = {"type": "ICEBERG_TABLE", "metadataLocation": "s3://b/t"}


def slow_merge_base(vs: VersionStore, a: str, b: str) -> str:
    fast = vs._linear_merge_base
    vs._linear_merge_base = lambda x, y: None  # type: ignore[method-assign]
    try:
        return vs.merge_base(a, b)
    finally:
        vs._linear_merge_base = fast  # type: ignore[method-assign]


def random_history(seed: int) -> tuple[VersionStore, list[str]]:
    rnd = random.Random(seed)
    vs = VersionStore(open_store("memory://"))
    branches = ["main"]
    hashes: list[str] = []
    for step in range(120):
        action = rnd.random()
        if action < 0.15 and hashes:
            name = f"b{step}"
            vs.create_reference(name, "BRANCH", rnd.choice(hashes))
            branches.append(name)
            continue
        target = rnd.choice(branches)
        head = vs.get_reference(target).hash
        if action < 0.3 and len(branches) > 1:
            source = rnd.choice([b for b in branches if b != target])
            src = vs.get_reference(source).hash
            r = vs.merge(target, head, source, src, default_mode="FORCE")
            if r.resultant_target_hash and r.was_applied:
                hashes.append(r.resultant_target_hash)
            continue
        c = vs.commit(target, head, {"message": str(step)}, [Put((f"k{step}",), TABLE)])
        hashes.append(c.hash)
    heads = [vs.get_reference(b).hash for b in branches]
    return vs, hashes + heads


def test_fast_merge_base_equals_the_generation_walk() -> None:
    for seed in range(6):
        vs, commits = random_history(seed)
        rnd = random.Random(seed)
        for _ in range(150):
            a, b = rnd.choice(commits), rnd.choice(commits)
            fast, slow = vs.merge_base(a, b), slow_merge_base(vs, a, b)
            if fast != slow:
                # two equally near candidates (criss-cross) may both be right: each must
                # be a common ancestor of the same generation
                assert vs.commit_of(fast).gen == vs.commit_of(slow).gen, (seed, a, b)
                assert slow_merge_base(vs, fast, a) == fast and slow_merge_base(vs, fast, b) == fast


def test_linear_divergence_reads_few_commits() -> None:
    """Two branches that diverged 2,000 commits ago: the merge base reads O(log² n)
    commits through skip pointers (about a thousand here, a few hundred distinct), not
    the 4,000 commits in between."""
    vs = VersionStore(open_store("memory://"))
    base = vs.commit("main", vs.get_reference("main").hash, {}, [Put(("k",), TABLE)]).hash
    vs.create_reference("dev", "BRANCH", base)
    heads = {"main": base, "dev": base}
    for i in range(2000):
        for branch in heads:
            op = Put((f"{branch}{i}",), TABLE)
            heads[branch] = vs.commit(branch, heads[branch], {}, [op]).hash
    reads = 0
    load = vs.objects.commit

    def counting(commit_id: str):  # type: ignore[no-untyped-def]
        nonlocal reads
        reads += 1
        return load(commit_id)

    vs.objects.commit = counting  # type: ignore[method-assign]
    started = time.perf_counter()
    assert vs.merge_base(heads["main"], heads["dev"]) == base
    elapsed = time.perf_counter() - started
    assert reads < 2000, reads
    assert elapsed < 1.0
